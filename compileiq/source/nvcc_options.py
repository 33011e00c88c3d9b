"""Every option nvcc 13.0 knows, long and short spellings: those `nvcc --help` lists and those it
takes without listing them (`-Xcicc`, `-Xcudafe`, `-Xfatbin`, ...: each one nvcc 13.0 does not
call an "Unknown option"). ``-forward-unknown-to-host-compiler`` hands none of these to the host
compiler; an option of a compile command that is none of these, and no ``-X...`` pass-through,
is the host compiler's under that flag (`nvcc_argv`)."""

from __future__ import annotations

_LISTED = frozenset([
    "--Ofast-compile", "--Wdefault-stream-launch", "--Werror", "--Wext-lambda-captures-this",
    "--Wmissing-launch-bounds", "--Wno-deprecated-declarations", "--Wno-deprecated-gpu-targets", "--Wreorder",
    "--allow-unsupported-compiler", "--archive-options", "--archiver-binary", "--augment-host-linker-script",
    "--brief-diagnostics", "--clean-targets", "--compile", "--compile-as-tools-patch", "--compiler-bindir",
    "--compiler-options", "--compress-mode", "--cubin", "--cuda", "--cudadevrt", "--cudart", "--debug",
    "--default-stream", "--define-macro", "--dependency-drive-prefix", "--dependency-output",
    "--dependency-target-name", "--device-c", "--device-debug", "--device-entity-has-hidden-visibility",
    "--device-link", "--device-stack-protector", "--device-w", "--diag-error", "--diag-suppress", "--diag-warn",
    "--disable-warnings", "--display-error-number", "--dlink-time-opt", "--dont-use-profile", "--dopt",
    "--drive-prefix", "--dryrun", "--entries", "--expt-extended-lambda", "--expt-relaxed-constexpr",
    "--extended-lambda", "--extensible-whole-program", "--extra-device-vectorization", "--fatbin",
    "--fdevice-syntax-only", "--fdevice-time-trace", "--fmad", "--force-cl-env-setup", "--forward-unknown-opts",
    "--forward-unknown-to-host-compiler", "--forward-unknown-to-host-linker", "--frandom-seed",
    "--ftemplate-backtrace-limit", "--ftemplate-depth", "--ftz", "--gen-opt-lto", "--generate-code",
    "--generate-dependencies", "--generate-dependencies-with-compile", "--generate-dependency-targets",
    "--generate-line-info", "--generate-nonsystem-dependencies",
    "--generate-nonsystem-dependencies-with-compile", "--gpu-architecture", "--gpu-code", "--help",
    "--host-linker-script", "--include-path", "--input-drive-prefix", "--jobserver", "--jump-table-density",
    "--keep", "--keep-device-functions", "--keep-dir", "--lib", "--libdevice-directory", "--library",
    "--library-path", "--link", "--linker-options", "--list-gpu-arch", "--list-gpu-code", "--lto", "--ltoir",
    "--m64", "--machine", "--maxrregcount", "--no-align-double", "--no-compress", "--no-device-link",
    "--no-display-error-number", "--no-exceptions", "--no-host-device-initializer-list",
    "--no-host-device-move-forward", "--nvlink-options", "--objdir-as-tempdir", "--optimization-info",
    "--optimize", "--options-file", "--optix-ir", "--output-directory", "--output-file", "--pre-include",
    "--prec-div", "--prec-sqrt", "--preprocess", "--profile", "--ptx", "--ptxas-options", "--qpp-config",
    "--relocatable-device-code", "--relocatable-link", "--relocatable-ptx", "--resource-usage", "--restrict",
    "--run", "--run-args", "--sanitize", "--save-temps", "--shared", "--source-in-ptx", "--split-compile",
    "--split-compile-extended", "--static-global-template-stub", "--std", "--system-include",
    "--target-directory", "--threads", "--time", "--undefine-macro", "--use-local-env", "--use_fast_math",
    "--verbose", "--version", "--x", "-D", "-E", "-G", "-I", "-L", "-M", "-MD", "-MF", "-MM", "-MMD", "-MP",
    "-MT", "-O", "-Ofc", "-U", "-V", "-Wdefault-stream-launch", "-Werror", "-Wext-lambda-captures-this",
    "-Wmissing-launch-bounds", "-Wno-deprecated-declarations", "-Wno-deprecated-gpu-targets", "-Wreorder",
    "-Xarchive", "-Xcompiler", "-Xlinker", "-Xnvlink", "-Xptxas", "-allow-unsupported-compiler", "-arbin",
    "-arch", "-arch-ls", "-astoolspatch", "-aug-hls", "-brief-diag", "-c", "-ccbin", "-clean", "-code",
    "-code-ls", "-compress-mode", "-cubin", "-cuda", "-cudadevrt", "-cudart", "-dc", "-ddp", "-default-stream",
    "-device-entity-has-hidden-visibility", "-device-stack-protector", "-diag-error", "-diag-suppress",
    "-diag-warn", "-dlink", "-dlto", "-dopt", "-dp", "-dryrun", "-dw", "-e", "-err-no", "-ewp",
    "-expt-extended-lambda", "-expt-relaxed-constexpr", "-extended-lambda", "-extra-device-vectorization",
    "-fatbin", "-fdevice-syntax-only", "-fdevice-time-trace", "-fmad", "-force-cl-env-setup",
    "-forward-unknown-opts", "-forward-unknown-to-host-compiler", "-forward-unknown-to-host-linker",
    "-frandom-seed", "-ftemplate-backtrace-limit", "-ftemplate-depth", "-ftz", "-g", "-gen-opt-lto", "-gencode",
    "-h", "-hls", "-idp", "-include", "-isystem", "-jobserver", "-jtd", "-keep", "-keep-device-functions",
    "-keep-dir", "-l", "-ldir", "-lib", "-lineinfo", "-link", "-lto", "-ltoir", "-m", "-m64", "-maxrregcount",
    "-no-compress", "-no-err-no", "-nodlink", "-noeh", "-nohdinitlist", "-nohdmoveforward", "-noprof", "-o",
    "-objtemp", "-odir", "-opt-info", "-optf", "-optix-ir", "-pg", "-prec-div", "-prec-sqrt", "-ptx",
    "-qpp-config", "-r", "-rdc", "-reloc-ptx", "-res-usage", "-restrict", "-run", "-run-args", "-sanitize",
    "-save-temps", "-shared", "-split-compile", "-split-compile-extended", "-src-in-ptx",
    "-static-global-template-stub", "-std", "-t", "-target-dir", "-time", "-use-local-env", "-use_fast_math",
    "-v", "-w", "-x"
])  # fmt: skip

# Not in `nvcc --help`, yet nvcc 13.0 takes them (checked: `nvcc --dryrun -c k.cu OPTION` says no
# "Unknown option"); -Xcicc and -Xcudafe pass options to the device front end, so they change the code.
_UNLISTED = frozenset([
    "-Xcicc", "--cicc-options", "-Xcudafe", "--cudafe-options", "-Xfatbin", "--fatbin-options",
    "-Xnvasm", "--nvasm-options", "-Xnvdisasm", "--nvdisasm-options", "--all-prefix", "--cpp-prefix",
    "--cudafe-prefix", "--cicc-prefix", "--ptxas-prefix", "--nvlink-prefix", "-aggressive-inline",
    "--aggressive-inline", "-nodinline", "--no-device-inline", "-fassociative-math", "--fassociative-math",
    "-legacy-launch-seq", "--legacy-launch-seq", "-no-shadow-functions", "--no-shadow-functions",
    "-restrict-in-struct", "--restrict-in-struct", "-no-libdevice", "--no-libdevice", "-nvvm-version",
    "--nvvm-version", "-cuda-api-version", "--cuda-api-version", "-global_var", "--global_var",
    "-nvasm-loopback", "--nvasm-loopback", "-use-cubin", "--use-cubin", "-tdump", "--tdump", "-tool-name",
    "--tool-name", "-dD", "--dD", "-dQ", "--export-dir", "--extern-mode", "--intern-mode",
    "--device-compilation", "--host-relocatable-link", "-host-r", "--version-ident", "-no-lineinfo-ia",
    "-Ofast-compile", "-ok", "-trap-into-debugger",
])  # fmt: skip
NVCC_OPTIONS = _LISTED | _UNLISTED
