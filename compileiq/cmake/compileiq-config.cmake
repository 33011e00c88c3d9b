# compileiq's CMake package: give CUDA sources the flags of an advanced-control file (ACF).
#
#   find_package(compileiq CONFIG REQUIRED PATHS "<output of: compileiq cmake-dir>")
#   compileiq_apply(TARGET kernels ACF kernels/sgemm.acf.toml)      # every CUDA source of a target
#   compileiq_apply(SOURCE sgemm.cu ACF kernels/sgemm.acf.toml)     # one source (or several)
#
# The flags come from `compileiq flags ACF --format json` at configure time: compileiq validates
# the ACF (only flags its search space can produce), so nothing of the file reaches a shell or is
# evaluated as CMake code. TARGET also sets the target's CUDA_ARCHITECTURES to the ACF's arch;
# with SOURCE, build the target for that architecture yourself. Editing the ACF re-runs configure.
# COMPILEIQ_EXECUTABLE names the command (default: `compileiq` on PATH or in $VIRTUAL_ENV/bin).

include_guard(GLOBAL)

if(NOT COMPILEIQ_EXECUTABLE)
  find_program(COMPILEIQ_EXECUTABLE NAMES compileiq HINTS "$ENV{VIRTUAL_ENV}/bin"
               DOC "the compileiq command")
endif()

function(compileiq_apply)
  cmake_parse_arguments(PARSE_ARGV 0 _ciq "" "TARGET;ACF" "SOURCE")
  if(_ciq_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "compileiq_apply: unexpected arguments: ${_ciq_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT _ciq_ACF)
    message(FATAL_ERROR "compileiq_apply: give ACF <file.acf.toml>")
  endif()
  if((_ciq_TARGET AND _ciq_SOURCE) OR (NOT _ciq_TARGET AND NOT _ciq_SOURCE))
    message(FATAL_ERROR "compileiq_apply: give either TARGET <target> or SOURCE <file.cu>...")
  endif()
  if(_ciq_TARGET AND NOT TARGET "${_ciq_TARGET}")
    message(FATAL_ERROR "compileiq_apply: no target named ${_ciq_TARGET}")
  endif()
  if(NOT COMPILEIQ_EXECUTABLE)
    message(FATAL_ERROR "compileiq_apply: the compileiq command was not found; set COMPILEIQ_EXECUTABLE")
  endif()

  get_filename_component(_acf "${_ciq_ACF}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  execute_process(
    COMMAND "${COMPILEIQ_EXECUTABLE}" flags "${_acf}" --format json --no-arch
    OUTPUT_VARIABLE _json ERROR_VARIABLE _error RESULT_VARIABLE _status)
  if(NOT _status EQUAL 0)
    string(STRIP "${_error}" _error)
    message(FATAL_ERROR "compileiq_apply(${_ciq_ACF}): ${_error}")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_acf}")

  string(JSON _arch GET "${_json}" cuda_architectures)
  string(JSON _count LENGTH "${_json}" flags)
  set(_options "")
  if(_count GREATER 0)
    math(EXPR _last "${_count} - 1")
    foreach(_i RANGE ${_last})
      string(JSON _flag GET "${_json}" flags ${_i})
      if(NOT _flag MATCHES "^[-A-Za-z0-9_=.+:/]+$")
        message(FATAL_ERROR "compileiq_apply(${_ciq_ACF}): unexpected flag '${_flag}'")
      endif()
      list(APPEND _options "${_flag}")  # one token each (ptxas options as -Xptxas=OPTION)
    endforeach()
  endif()

  if(_ciq_TARGET)
    set_property(TARGET "${_ciq_TARGET}" PROPERTY CUDA_ARCHITECTURES "${_arch}")
    foreach(_option IN LISTS _options)  # SHELL: keeps CMake from de-duplicating a target's options
      target_compile_options("${_ciq_TARGET}" PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:${_option}>")
    endforeach()
    message(STATUS "compileiq: ${_ciq_TARGET}: flags of ${_ciq_ACF} (sm_${_arch})")
  else()
    # a source's COMPILE_OPTIONS are used as they are (no SHELL:, no de-duplication)
    set_property(SOURCE ${_ciq_SOURCE} APPEND PROPERTY COMPILE_OPTIONS ${_options})
    message(STATUS "compileiq: ${_ciq_SOURCE}: flags of ${_ciq_ACF}; build for CUDA architecture ${_arch}")
  endif()
endfunction()
