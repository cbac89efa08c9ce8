"""Sandbox bootstrap, executed as a script inside the sandbox process (not imported by the library).

It starts with the parent's privileges, applies the isolation the parent asked for (network and
mount namespaces, private temporary directories, resource limits, a fresh unprivileged uid), reports
what it could apply on the result channel, then runs the untrusted program in this same interpreter
(one interpreter start per execution) and, for function tests, evaluates the test expressions.
The specification arrives as JSON on stdin; stdin is then replaced by the program's input.
"""

import ctypes
import json
import os
import resource
import sys
import traceback

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REC = 0x4000
MS_NOEXEC = 0x8
MS_PRIVATE = 0x40000


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


def main():
    spec = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    # Keep our own references: the program may monkeypatch modules, which only hurts itself.
    write, dumps, result_fd = os.write, json.dumps, spec["result_fd"]
    report = {"network": False, "filesystem": False, "user": False, "processes": False}
    _isolate(spec, report)
    write(result_fd, (dumps({"isolation": report}) + "\n").encode())
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)
    sys.argv = ["solution.py"]
    namespace = {"__name__": "__main__", "__builtins__": __builtins__, "__file__": "solution.py"}
    exit_code, finished = 0, False
    try:
        exec(compile(spec["source"], "solution.py", "exec"), namespace)
        finished = True
    except SystemExit as exit_request:
        exit_code = _exit_code(exit_request.code)
    except BaseException:
        traceback.print_exc()
        exit_code = 1
    if finished:
        for index, (kind, text) in enumerate(spec["tests"]):
            try:
                if kind == "value":
                    line = {"i": index, "repr": repr(eval(text, namespace))}
                else:
                    exec(text, namespace)
                    line = {"i": index, "ok": True}
            except SystemExit:
                break
            except BaseException as error:
                line = {"i": index, "error": type(error).__name__}
            write(result_fd, (dumps(line) + "\n").encode())
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(exit_code)


if __name__ == "__main__":
    main()
