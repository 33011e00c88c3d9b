#pragma once
#ifndef MYLIB_WEIGHT
#define MYLIB_WEIGHT 0.25f
#endif
