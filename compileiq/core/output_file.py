"""Replace a file the user named (an ACF) the way an editor would: atomically, keeping the file's
mode, never over a symbolic link, a device, folder or pipe, and leaving no temporary file behind
when the write fails. An input file is held to the same kinds: a device, folder or pipe is named as
such, never opened."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from compileiq.core import file_sniff
from compileiq.core.errors import UsageError


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same path once links are followed, or two hard links to
    one file. False when either does not exist (yet) and their paths differ."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class OutputFileError(UsageError):
    """The output path names something that must not be replaced, or cannot be written."""


def check_target(path: Path) -> Path:
    """The regular file that writing `path` replaces or creates (its folders' links resolved); a
    one-line OutputFileError when that is something else, or `path` itself a symbolic link (a
    dangling one would have the write create its target, folders and all, wherever it points:
    outside the output named), or its folder cannot take it."""
    if os.path.islink(path):
        raise OutputFileError(f"cannot write {path}: it is a symbolic link; name the file itself, not a link to it")
    target = Path(os.path.realpath(path))
    try:
        info = target.lstat()
    except FileNotFoundError:
        info = None
    except OSError as error:
        raise OutputFileError(f"cannot write {path}: {error.strerror or error}") from None
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise OutputFileError(f"cannot write {path}: a symlink loop")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise OutputFileError(f"cannot write {path}: it is {kind_of(info.st_mode)}, not a regular file")
    folder = _existing_ancestor(target.parent)
    if not folder.is_dir():
        raise OutputFileError(f"cannot write {path}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputFileError(f"cannot write {path}: {folder} is read-only or not writable by this user")
    return target


# Build files, by name (lower case): the CMake, Make, Bazel, Meson, Ninja, GN, SCons and Autotools
# files that `flags`'s snippets are pasted into or that generate them, and PTX by its suffix (its text
# is `file_sniff`'s): never a report's or an ACF's place (`is_build_file`).
BUILD_FILE_NAMES = ("cmakelists.txt", "cmakepresets.json", "cmakeuserpresets.json", "build", "build.bazel",
                    "workspace", "workspace.bazel", "module.bazel", ".bazelrc", ".bazelversion", "meson.build",
                    "meson_options.txt", "meson.options", "sconstruct", "sconscript", "configure")
# any name that starts so (Makefile.in, Makefile.linux, GNUmakefile.in, makefile-cuda)
MAKEFILE_PREFIXES = ("makefile", "gnumakefile", "bsdmakefile")
# a protected name with more after it (CMakeLists.txt.in, CMakePresets.json.in, SConstruct.py), and
# Bazel's and GN's in their own case (BUILD.gn, WORKSPACE.bzlmod: a report build.md is no build file)
BUILD_FILE_STEMS = ("cmakelists.txt.", "cmakepresets.json.", "cmakeuserpresets.json.", "meson.build.",
                    "meson_options.txt.", "sconstruct.", "sconscript.")
BUILD_FILE_PREFIXES = ("BUILD.", "WORKSPACE.")
BUILD_FILE_SUFFIXES = (".cmake", ".bzl", ".bazel", ".bazelrc", ".mk", ".mak", ".am", ".ac", ".ninja", ".gn", ".gni",
                       ".vcxproj")


# what this program's reports and exports are called: a name that starts like a build file but ends
# so (BUILD.md, makefile_gen.report.html) is a report the user named, never a build file to keep
REPORT_SUFFIXES = (".md", ".html", ".htm", ".xml", ".json", ".json.gz", ".txt", ".svg", ".png", ".csv", ".log")


def is_build_file(name: str) -> bool:
    """Whether a file called `name` is a build file (`BUILD_FILE_NAMES`, `MAKEFILE_PREFIXES`,
    `BUILD_FILE_STEMS`, `BUILD_FILE_PREFIXES`, `BUILD_FILE_SUFFIXES`) or a template of one
    (configure.in, defs.bzl.in: `.in` after a build file's name)."""
    lower = name.lower()
    if lower in BUILD_FILE_NAMES:
        return True
    if (lower.startswith(MAKEFILE_PREFIXES) or name.startswith(BUILD_FILE_PREFIXES)) and \
            not lower.endswith(REPORT_SUFFIXES):
        return True
    if lower.endswith(BUILD_FILE_SUFFIXES) or lower.startswith(BUILD_FILE_STEMS):
        return True
    return lower.endswith(".in") and is_build_file(name[:-3])


INPUT_SUFFIXES = (".toml", ".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c", ".py", ".json", ".json.gz", ".db", ".sqlite")


# an empty file of these names is an older output's place after all (`mktemp --suffix=.json`)
OWN_SUFFIXES = {file_sniff.EXPORT: (".json", ".json.gz")}


def check_report_target(path: Path, output: str, inputs: tuple[Path, ...] = ()) -> Path:
    """`check_target` for a report, a report's figure, a CI summary or an export (`output`, its
    `file_sniff` kind): an existing file is replaced only when it is an earlier output of that kind
    (its first bytes, `file_sniff.output_kind`) or empty, and never one of the command's `inputs`
    (a gate's ACF, however spelled or linked). Lists of names and suffixes can never hold every
    file a user keeps (build.sh, Dockerfile, ci.yml, compile_commands.json...): a mistyped option
    would destroy it, so anything else is refused (`replace_problem`)."""
    target = check_target(path)
    problem = replace_problem(target, output, inputs)
    if problem is not None:
        raise OutputFileError(f"not replacing {path}: {problem}; choose another name or delete it first")
    return target


def replace_problem(target: Path, output: str, inputs: tuple[Path, ...] = ()) -> str | None:
    """Why an existing `target` may not take this `output` ("it is a build file, not a compileiq
    report"), None when it may: it does not exist, is an earlier output of this kind, or is empty
    and its name says no build file, source, PTX or input (`protected_kind`: an empty tune.toml
    or CMakeLists.txt is kept). What it is comes from `protected_kind` (its text or its name), or
    from the output it is, for the clearer message."""
    if not target.exists():
        return None
    if any(same_file(target, p) for p in inputs):
        return "it is one of this command's inputs"
    data = file_sniff.head(target)
    if data is None:
        return f"it cannot be read to tell whether it is {output}"
    found = file_sniff.output_kind(data)
    kind = _protected(target.name, data, OWN_SUFFIXES.get(output, ()))
    if found == output and kind in (None, found):  # a tune.toml or CMakeLists.txt is none, whatever its first line
        return None
    if not data and kind is None:
        return None
    what = found if found not in (None, file_sniff.EXPORT) else kind or found
    return f"it is {what}, not {output}" if what else f"it is not {output}"


def protected_kind(target: Path, inputs: tuple[Path, ...] = (), may_replace: tuple[str, ...] = ()) -> str | None:
    """What an existing `target` is that no output may replace (one of `inputs`, however spelled or
    linked; a database, an ACF, a compileiq export, gzip or not, a source or PTX, by its first few KiB
    (`file_sniff`) or its name; a build file (CMakeLists.txt, Makefile*, BUILD, *.cmake, build.ninja...) by its name (`is_build_file`);
    a .toml...), None when it may be replaced or does not exist: `tune --out`'s rule (`acf_replace`,
    which lets an ACF replace an ACF), and what `replace_problem` names a file it refuses.
    `may_replace` never lets a database, a source, PTX or a build file be replaced."""
    if not target.exists():
        return None
    if any(same_file(target, p) for p in inputs):
        return "one of this command's inputs"
    data = file_sniff.head(target)
    return None if data is None else _protected(target.name, data, may_replace)


def _protected(filename: str, data: bytes, may_replace: tuple[str, ...]) -> str | None:
    """`protected_kind` of a file named `filename` whose first bytes are `data`."""
    kind = file_sniff.content_kind(data)
    if kind in ("an SQLite database", "a C/C++/CUDA source", "a PTX file"):
        return kind
    if is_build_file(filename):
        return "a build file"
    name = filename.lower()
    if name.endswith(".ptx"):
        return "a PTX file"
    if name.endswith(may_replace):
        return None
    if kind is not None:
        return kind
    if name.endswith(".acf.toml"):
        return "an ACF"
    suffix = next((s for s in INPUT_SUFFIXES if name.endswith(s)), None)
    return f"a {suffix} file" if suffix is not None else None


def not_regular(path: Path) -> str | None:
    """What an existing `path` is when it is not a regular file ("a named pipe", "a directory"...),
    from stat alone: it is never opened, so a named pipe cannot block the reader. None for a
    regular file (or a link to one) and for a path that does not exist (the reader says not found)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else kind_of(mode)


def write_atomically(path: Path, data: bytes) -> Path:
    """Write `data` to `path` (never through a symlink) by a temporary file and a rename: a reader
    never sees half a file; a new file gets the umask's mode, a replaced one keeps its own."""
    target = check_target(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        existing = target.stat() if target.exists() else None
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as error:
        raise OutputFileError(f"cannot write {path}: {error.strerror or error}") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        _copy_mode(temporary, existing)
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise OutputFileError(f"cannot write {path}: {error.strerror or error}") from None
        raise
    return target


def _copy_mode(temporary: str, existing: os.stat_result | None) -> None:
    if existing is None:
        os.chmod(temporary, 0o666 & ~_umask())
        return
    os.chmod(temporary, stat.S_IMODE(existing.st_mode))
    if (existing.st_uid, existing.st_gid) != (os.getuid(), os.getgid()):
        with contextlib.suppress(OSError):  # keeping the owner needs privileges: best effort
            os.chown(temporary, existing.st_uid, existing.st_gid)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _existing_ancestor(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def kind_of(mode: int) -> str:
    """What a file of this mode is when it is not a regular file ("a named pipe", "a directory"...)."""
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device",
             stat.S_ISFIFO: "a named pipe", stat.S_ISSOCK: "a socket"}
    return next((name for test, name in kinds.items() if test(mode)), "not a regular file")
