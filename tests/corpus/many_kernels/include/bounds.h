#pragma once
#define SCAN_THREADS 512
#define COPY_THREADS 64
