# compileiq's CMake package: give CUDA sources the flags of an advanced-control file (ACF).
#
#   find_package(compileiq CONFIG REQUIRED PATHS "<output of: compileiq cmake-dir>")
#   compileiq_apply(TARGET kernels ACF kernels/sgemm.acf.toml)      # every CUDA source of a target
#   compileiq_apply(SOURCE sgemm.cu ACF kernels/sgemm.acf.toml)     # one source (or several)
#
# SOURCE names a file CMake compiles: a kernel tuned in a header (.cuh) gets its flags through the
# .cu that includes it, or TARGET; a header given to SOURCE stops configure (a property on it does nothing).
#
# The flags come from `compileiq flags ACF --format json` at configure time: compileiq validates
# the ACF (only flags its search space can produce), so nothing of the file reaches a shell or is
# evaluated as CMake code. TARGET keeps a target's CUDA_ARCHITECTURES that build the ACF's arch
# among others (the flags reach every arch, checked on the ACF's alone: configure says so), and
# sets it to the ACF's arch where they do not (configure names what it replaced; a 90-virtual entry,
# PTX alone, becomes 90 where the ACF holds ptxas settings, the other entries kept): 90-real where the
# ACF builds machine code alone (a shipped -gencode arch=compute_90,code=sm_90), else 90; with SOURCE,
# build the target for that architecture yourself. An ACF whose build makes sm_86 machine code from
# compute_80 PTX (-arch=compute_80 -code=sm_86) has no CUDA_ARCHITECTURES value (86-real builds it
# from compute_86 PTX, other code): the options carry those arch words and the target is set OFF
# (configure stops where the target builds sm_86 among other archs, which OFF would drop; with
# SOURCE, set the target OFF yourself). Editing the ACF re-runs configure.
# COMPILEIQ_EXECUTABLE names the command (default: `compileiq` on PATH or in $VIRTUAL_ENV/bin).
#
# An ACF tuned from a compile command (--compile-commands) may name shipped flags its settings turn
# off or change ([baseline] remove: appending flags cannot undo `--use_fast_math` or an earlier
# `-maxrregcount`). compileiq_apply takes such a flag out of the target's (or the sources') own
# COMPILE_OPTIONS where it is an item of its own; where it is still anywhere else it can see (inside
# a generator expression, the directory's COMPILE_OPTIONS, CMAKE_CUDA_FLAGS[_<CONFIG>]), configure
# stops and names the place: the build would not be the one the ACF's evidence records.

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
  # a header is never compiled: a source property on it would give the flags to nothing, silently
  foreach(_source IN LISTS _ciq_SOURCE)
    if(_source MATCHES "\\.([cC][uU][hH]|[hH]|[hH][hH]|[hH][pP][pP]|[hH][xX][xX]|[iI][nN][lL]|[iI][nN][cC])$")
      message(FATAL_ERROR "compileiq_apply: SOURCE ${_source} is a header, which CMake never compiles: its flags "
              "would reach nothing and the .cu files that #include it would build untuned; use "
              "compileiq_apply(TARGET <target> ACF ${_ciq_ACF}) for the target that builds them, or give SOURCE "
              "the .cu that includes it")
    endif()
  endforeach()
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

  # as compileiq gives it: 90-real where the ACF builds machine code only (its shipped
  # -gencode arch=compute_90,code=sm_90; a plain 90 would embed PTX too), 90-virtual for PTX
  # only (its shipped -arch=compute_90, kept so where the ACF holds no ptxas setting), else 90
  # OFF where no CUDA_ARCHITECTURES builds what the ACF records (sm_86 machine code from compute_80
  # PTX: 86-real makes it from compute_86 PTX, other code): the arch words then go in the options
  string(JSON _arch GET "${_json}" cuda_architectures)
  if(NOT _arch MATCHES "^([0-9]+[a-z]?(-real|-virtual)?|OFF)$")
    message(FATAL_ERROR "compileiq_apply(${_ciq_ACF}): unexpected cuda_architectures '${_arch}'")
  endif()
  string(REGEX REPLACE "-(real|virtual)$" "" _number "${_arch}")
  # what the shipped arch flags embed where CUDA_ARCHITECTURES differs (PTX only, older PTX): said, never silent
  string(JSON _note ERROR_VARIABLE _no_note GET "${_json}" cmake_note)
  if(_note AND NOT _no_note)
    message(STATUS "compileiq: ${_ciq_ACF}: ${_note}")
  endif()
  # one token each (ptxas options as -Xptxas=OPTION)
  _compileiq_strings("${_json}" flags "^[-A-Za-z0-9_=.+:/]+$" "${_ciq_ACF}" _options)
  set(_arch_words "")
  if(_arch STREQUAL "OFF")
    _compileiq_strings("${_json}" arch_flags "^-(arch|code)=(sm|compute)_[0-9]+[a-z]?$" "${_ciq_ACF}" _arch_words)
    if(NOT _arch_words)
      message(FATAL_ERROR "compileiq_apply(${_ciq_ACF}): cuda_architectures OFF without arch_flags")
    endif()
    list(JOIN _arch_words " " _arch_text)
    list(PREPEND _options ${_arch_words})
  endif()

  if(_ciq_TARGET)
    _compileiq_remove("${_json}" "${_ciq_ACF}" "${_ciq_TARGET}" "")
  else()
    foreach(_source IN LISTS _ciq_SOURCE)
      _compileiq_remove("${_json}" "${_ciq_ACF}" "" "${_source}")
    endforeach()
  endif()

  if(_ciq_TARGET AND _arch STREQUAL "OFF")
    # CMake cannot say the ACF's build: the target builds it from the options alone (OFF), as one
    # that does not build the ACF's arch is set to it. One that builds it among other archs would
    # lose them: configure stops and says so, never narrowing it silently.
    get_property(_archs TARGET "${_ciq_TARGET}" PROPERTY CUDA_ARCHITECTURES)
    string(JSON _tuned GET "${_json}" arch)
    string(REGEX REPLACE "^sm_" "" _tuned "${_tuned}")
    set(_builds_it FALSE)
    set(_others FALSE)
    foreach(_entry IN LISTS _archs)
      string(REGEX REPLACE "-(real|virtual)$" "" _entry_number "${_entry}")
      if(_entry_number STREQUAL _tuned)
        set(_builds_it TRUE)
      elseif(_entry MATCHES "^(all|all-major|native)$")
        set(_builds_it TRUE)
        set(_others TRUE)
      elseif(NOT _entry STREQUAL "OFF")
        set(_others TRUE)
      endif()
    endforeach()
    if(_builds_it AND _others)
      message(FATAL_ERROR "compileiq_apply(${_ciq_ACF}): the ACF records a build CUDA_ARCHITECTURES cannot say "
              "(${_arch_text}: sm_${_tuned} from older PTX); ${_ciq_TARGET}'s CUDA_ARCHITECTURES ${_archs} builds "
              "other archs too, which setting it OFF would drop: set it OFF and give each arch's flags in its "
              "options yourself")
    endif()
    set_property(TARGET "${_ciq_TARGET}" PROPERTY CUDA_ARCHITECTURES OFF)
    set(_how "${_arch_text} in its options, CUDA_ARCHITECTURES OFF")
    if(_archs AND NOT _archs STREQUAL "OFF")
      string(APPEND _how "; CUDA_ARCHITECTURES ${_archs} replaced: CMake cannot build sm_${_tuned} from older PTX")
    endif()
    foreach(_option IN LISTS _options)  # SHELL: keeps CMake from de-duplicating a target's options
      target_compile_options("${_ciq_TARGET}" PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:${_option}>")
    endforeach()
    message(STATUS "compileiq: ${_ciq_TARGET}: flags of ${_ciq_ACF} (${_how})")
  elseif(_ciq_TARGET)
    # A target that builds the ACF's arch among others keeps them all (narrowing it would drop archs
    # from the product); where it builds PTX alone for it (NN-virtual), that entry becomes NN; one
    # that does not build it is set to it, and configure says what it replaced or changed.
    get_property(_archs TARGET "${_ciq_TARGET}" PROPERTY CUDA_ARCHITECTURES)
    set(_builds_it FALSE)
    set(_others FALSE)
    set(_ptx_only FALSE)  # the ACF's arch as NN-virtual, and no entry that builds its machine code
    set(_other_machine "")  # the other entries that build machine code, and those that embed PTX alone
    set(_other_ptx "")
    foreach(_entry IN LISTS _archs)
      string(REGEX REPLACE "-(real|virtual)$" "" _entry_number "${_entry}")
      if(_entry_number STREQUAL _number AND _entry MATCHES "-virtual$" AND NOT _arch MATCHES "-virtual$")
        set(_ptx_only TRUE)  # PTX alone: the ACF's ptxas settings need machine code (its cmake_note)
      elseif(_entry_number STREQUAL _number)
        set(_builds_it TRUE)
      elseif(_entry MATCHES "^(all|all-major|native)$")
        set(_builds_it TRUE)
        set(_others TRUE)
        list(APPEND _other_machine "${_entry}")
      else()
        set(_others TRUE)
        if(_entry MATCHES "-virtual$")
          list(APPEND _other_ptx "${_entry}")
        else()
          list(APPEND _other_machine "${_entry}")
        endif()
      endif()
    endforeach()
    # what the other entries get: ptxas settings never reach PTX the driver JIT-compiles
    set(_unchecked "")
    if(_other_machine)
      list(JOIN _other_machine ", " _names)
      set(_unchecked "these flags reach ${_names} unchecked")
    endif()
    if(_other_ptx)
      list(JOIN _other_ptx ", " _names)
      if(_unchecked)
        string(APPEND _unchecked "; ")
      endif()
      string(APPEND _unchecked "${_names}: PTX alone (JIT-compiled by the driver), which the ptxas settings do not "
             "reach and the front-end settings reach unchecked")
    endif()
    set(_how "sm_${_number}")
    if(_ptx_only AND NOT _builds_it)
      # that entry alone becomes NN (its PTX kept, sm_NN machine code added); every other entry stays
      set(_before "${_archs}")
      list(TRANSFORM _archs REPLACE "^${_number}-virtual$" "${_number}")
      set_property(TARGET "${_ciq_TARGET}" PROPERTY CUDA_ARCHITECTURES "${_archs}")
      set(_how "sm_${_number}; CUDA_ARCHITECTURES ${_before} made ${_archs}: sm_${_number} machine code added for the ACF's ptxas settings, compute_${_number} PTX kept")
      if(_others)
        string(APPEND _how ", the other archs kept: ${_unchecked}")
      endif()
    elseif(_builds_it AND _others)
      set(_how "tuned and checked on sm_${_number} only; CUDA_ARCHITECTURES ${_archs} kept: ${_unchecked}")
    elseif(NOT _builds_it)
      set_property(TARGET "${_ciq_TARGET}" PROPERTY CUDA_ARCHITECTURES "${_arch}")
      if(_archs)
        set(_how "sm_${_number}; CUDA_ARCHITECTURES ${_archs} replaced by ${_arch}, the arch the ACF was tuned for")
      endif()
    endif()
    foreach(_option IN LISTS _options)  # SHELL: keeps CMake from de-duplicating a target's options
      target_compile_options("${_ciq_TARGET}" PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:${_option}>")
    endforeach()
    message(STATUS "compileiq: ${_ciq_TARGET}: flags of ${_ciq_ACF} (${_how})")
  else()
    # a source's COMPILE_OPTIONS are used as they are (no SHELL:, no de-duplication)
    set_property(SOURCE ${_ciq_SOURCE} APPEND PROPERTY COMPILE_OPTIONS ${_options})
    if(_arch STREQUAL "OFF")
      message(STATUS "compileiq: ${_ciq_SOURCE}: flags of ${_ciq_ACF}, ${_arch_text} among them; set the target's "
              "CUDA_ARCHITECTURES OFF (any other value adds the arch built from its own PTX)")
    else()
      message(STATUS "compileiq: ${_ciq_SOURCE}: flags of ${_ciq_ACF}; build for CUDA architecture ${_arch}")
    endif()
  endif()
endfunction()

# [baseline] remove: take each flag out of the target's (sources') own options, or stop and say where it is.
# The JSON's list `key` of strings, each checked against `pattern` (compileiq wrote them, but the
# package takes nothing to a command line unchecked), into `out`.
function(_compileiq_strings json key pattern acf out)
  string(JSON _count LENGTH "${json}" ${key})
  set(_found "")
  if(_count GREATER 0)
    math(EXPR _last "${_count} - 1")
    foreach(_i RANGE ${_last})
      string(JSON _item GET "${json}" ${key} ${_i})
      if(NOT _item MATCHES "${pattern}")
        message(FATAL_ERROR "compileiq_apply(${acf}): unexpected ${key} entry '${_item}'")
      endif()
      list(APPEND _found "${_item}")
    endforeach()
  endif()
  set(${out} "${_found}" PARENT_SCOPE)
endfunction()

function(_compileiq_remove json acf target source)
  _compileiq_strings("${json}" remove "^[-A-Za-z0-9_=.+:/ ]+$" "${acf}" _flags)
  if(NOT _flags)
    return()
  endif()
  if(target)
    get_target_property(_options "${target}" COMPILE_OPTIONS)
    set(_owner "${target}'s COMPILE_OPTIONS (target_compile_options)")
  else()
    get_source_file_property(_options "${source}" COMPILE_OPTIONS)
    set(_owner "the COMPILE_OPTIONS of ${source}")
  endif()
  if(NOT _options)
    set(_options "")
  endif()
  foreach(_flag IN LISTS _flags)
    set(_kept "")
    set(_removed FALSE)
    foreach(_option IN LISTS _options)
      if(_option STREQUAL _flag OR _option STREQUAL "SHELL:${_flag}"
         OR _option STREQUAL "$<$<COMPILE_LANGUAGE:CUDA>:${_flag}>"
         OR _option STREQUAL "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:${_flag}>")
        set(_removed TRUE)
      else()
        list(APPEND _kept "${_option}")
      endif()
    endforeach()
    set(_options "${_kept}")
    string(REGEX REPLACE "([.+])" "\\\\\\1" _pattern "${_flag}")
    string(REPLACE " " "[ ;]+" _pattern "${_pattern}")
    set(_pattern "(^|[ ;:>])${_pattern}($|[ ;>])")
    get_directory_property(_directory COMPILE_OPTIONS)
    set(_places "")
    foreach(_where IN ITEMS target directory CMAKE_CUDA_FLAGS CMAKE_CUDA_FLAGS_DEBUG CMAKE_CUDA_FLAGS_RELEASE
                               CMAKE_CUDA_FLAGS_RELWITHDEBINFO CMAKE_CUDA_FLAGS_MINSIZEREL)
      if(_where STREQUAL "target")
        set(_text "${_options}")
        set(_name "${_owner}")
      elseif(_where STREQUAL "directory")
        set(_text "${_directory}")
        set(_name "the directory's COMPILE_OPTIONS (add_compile_options)")
      else()
        set(_text "${${_where}}")
        set(_name "${_where}")
      endif()
      if(_text MATCHES "${_pattern}")
        list(APPEND _places "${_name}")
      endif()
    endforeach()
    if(_places)
      list(JOIN _places ", " _places)
      message(FATAL_ERROR "compileiq_apply(${acf}): the ACF's settings change the shipped flag '${_flag}' "
              "([baseline] remove), which is still in ${_places}: take it out there (appending the ACF's "
              "flags cannot turn it off, and the build would not be the one its evidence records)")
    endif()
    if(_removed)
      message(STATUS "compileiq: removed '${_flag}' from ${_owner}, as ${acf} asks")
    else()
      message(STATUS "compileiq: ${acf} asks to remove '${_flag}' from the compile command: not in ${_owner}; "
              "make sure nothing else adds it")
    endif()
  endforeach()
  if(target)
    set_property(TARGET "${target}" PROPERTY COMPILE_OPTIONS "${_options}")
  else()
    set_property(SOURCE "${source}" PROPERTY COMPILE_OPTIONS "${_options}")
  endif()
endfunction()
