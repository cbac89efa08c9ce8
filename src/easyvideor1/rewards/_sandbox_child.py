"""Sandbox bootstrap, executed as a script inside the sandbox process (not imported by the library).

It starts with the parent's privileges, applies the isolation the parent asked for (network and
mount namespaces, private temporary directories, resource limits, a fresh unprivileged uid), reports
what it could apply on the report descriptor, then plays one role (one interpreter start each):

* `program`: run the untrusted program as `__main__` (stdin/stdout tests);
* `serve`: run the program, then answer a judge's requests about its globals (`_sandbox_rpc`);
* `judge`: run assertion tests against a `serve` process, writing verdicts on the report descriptor.

Before any untrusted code runs, every descriptor but 0, 1, 2 and the judge's socket is closed, so
the program holds nothing the parent reads as a result (its stdout is only ever compared with an
expected output, or ignored). The specification arrives as JSON on stdin; stdin is then replaced by
the program's input.
"""

import ctypes
import json
import os
import resource
import sys
import traceback

# Imported now, with the parent's privileges (the package may not be readable by the sandbox uid).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _sandbox_rpc  # noqa: E402

del sys.path[0]

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REC = 0x4000
MS_NOEXEC = 0x8
MS_PRIVATE = 0x40000
PR_SET_DUMPABLE = 4


def _isolate(spec, report):
    """Namespaces first (they need privileges), then limits, then the privilege drop."""
    libc = ctypes.CDLL(None, use_errno=True)
    is_root = os.geteuid() == 0
    if spec["network"]:
        # Without root a user namespace grants the right to create the network namespace.
        report["network"] = libc.unshare(CLONE_NEWNET | (0 if is_root else CLONE_NEWUSER)) == 0
    workdir = spec["workdir"]
    private_dirs = spec["private_dirs"]
    if private_dirs and is_root and libc.unshare(CLONE_NEWNS) == 0:
        if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0:
            options = f"size={spec['tmpfs_bytes']},mode=1777".encode()
            mounted = [
                libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) == 0
                for path in private_dirs
            ]
            if all(mounted):
                workdir = os.path.join(private_dirs[0], "work")
                os.mkdir(workdir, 0o700)
                report["filesystem"] = True
    uid = spec["uid"]
    if uid is not None:
        os.chown(workdir, uid, uid)
    if report["filesystem"] and libc.unshare(CLONE_NEWPID) == 0:
        _become_namespace_init(libc, report)
    _replace_stdin(workdir, spec["stdin"].encode())
    limits = spec["limits"]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"], limits["processes"]))
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        report["user"] = os.getuid() == uid and os.geteuid() == uid
    os.chdir(workdir)
    os.environ["HOME"] = workdir
    os.umask(0o077)


def _become_namespace_init(libc, report):
    """Fork into the new pid namespace: the child (its pid 1) runs the program; this process waits.

    When the namespace's pid 1 exits, the kernel kills and reaps every process left in it, so no
    orphan or zombie of the program outlives the execution (even where the host's init does not
    reap orphans). A fresh /proc hides the host's processes from the program.
    """
    child = os.fork()
    if child == 0:
        report["processes"] = (
            libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0
        )
        return
    _close_descriptors(())  # this waiting process outlives nothing it should hold
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):  # die the same way, so the parent sees the signal
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _replace_stdin(workdir, data):
    try:
        fd = os.open(workdir, os.O_TMPFILE | os.O_RDWR, 0o600)
    except (AttributeError, OSError):
        path = os.path.join(workdir, ".stdin")
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.unlink(path)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
    os.close(fd)


def _exit_code(code):
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _close_descriptors(keep):
    """Close every descriptor above 2 except `keep` (the parent passed only what it meant to)."""
    low = 3
    for fd in sorted(set(keep)):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1 << 16))


def _run_program(source):
    """Run the program as `__main__`; returns (namespace, finished, exit code)."""
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)
    sys.argv = ["solution.py"]
    namespace = {"__name__": "__main__", "__builtins__": __builtins__, "__file__": "solution.py"}
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
        return namespace, True, 0
    except SystemExit as exit_request:
        return namespace, False, _exit_code(exit_request.code)
    except BaseException:
        traceback.print_exc()
        return namespace, False, 1


def main():
    # Not dumpable: a process of the same uid (without root, the program is one) cannot trace this
    # process, read its memory or open its descriptors through /proc. As root the uid change
    # below has the same effect; the program may make its own process dumpable again, to no avail.
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    spec = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    report_fd, link_fd, role = spec["report_fd"], spec.get("link_fd"), spec["role"]
    report = {"network": False, "filesystem": False, "user": False, "processes": False}
    _isolate(spec, report)
    os.write(report_fd, (json.dumps({"isolation": report}) + "\n").encode())
    exit_code = 0
    if role == "judge":  # never runs the program: its report descriptor carries the verdicts
        _close_descriptors((report_fd, link_fd))
        _sandbox_rpc.judge(link_fd, report_fd, spec["tests"], spec["test_time_s"])
    else:
        _close_descriptors(() if link_fd is None else (link_fd,))
        namespace, finished, exit_code = _run_program(spec["source"])
        if role == "serve":
            try:
                _sandbox_rpc.serve(link_fd, namespace, finished)
            except BaseException:  # the judge hung up (it has its verdicts) or the program broke the server
                pass
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(exit_code)


if __name__ == "__main__":
    main()
