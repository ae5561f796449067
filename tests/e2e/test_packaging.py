# SPDX-License-Identifier: Apache-2.0
"""Packaging (issue 4): the man page, the Debian package, the static binary, the deployment examples.

The package is made with cpack from the build under test ($LASTCALL_BUILD) into a temp dir, then
inspected, unpacked and installed into a temporary root. The static binary is the build's
static/lastcall (the same objects linked statically), or the one LASTCALL_STATIC_BINARY names.
"""
import gzip
import json
import os
import pwd
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import lctest

SOURCE = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.path.abspath(lctest.BUILD)


def cache_option(name):
    """A BOOL option of the build under test, from its CMakeCache.txt."""
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            m = re.search(rf"(?m)^{name}:BOOL=(\w+)$", f.read())
    except OSError:
        return False
    return bool(m) and m.group(1).upper() in ("ON", "TRUE", "1", "YES")


def skip_in_instrumented_builds():
    # make test-sanitize runs the whole suite again: a package or a static build made from an
    # ASan build would test nothing new and cost minutes of the CI budget.
    for option in ("LASTCALL_SANITIZE", "LASTCALL_FUZZ"):
        if cache_option(option):
            raise unittest.SkipTest(f"{option} build: packaging is tested in the ordinary build")


def has_static_build():
    """Whether the build under test makes the static binary (and the .deb installs it)."""
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            static_off = re.search(r"(?m)^LASTCALL_STATIC:BOOL=(OFF|FALSE|0|NO)$", f.read())
    except OSError:
        return False
    return not static_off and not cache_option("LASTCALL_SHARED_DEPS")


def require_tools(*tools):
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise unittest.SkipTest(f"{', '.join(missing)} not installed (make package installs them)")


def run(cmd, timeout=120, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def long_options(help_text):
    """Every --option that a CLI11 help text lists in its option column."""
    found = set()
    for line in help_text.splitlines():
        m = re.match(r"\s+(?:-\w,)?(--[a-z][a-z0-9-]*)", line)
        if m:
            found.add(m.group(1))
    return found


def man_page_text():
    path = os.path.join(BUILD, "docs", "lastcall.1.gz")
    if not os.path.exists(path):
        if shutil.which("scdoc") is None:
            raise unittest.SkipTest("scdoc not installed: the man page was not built (make deps)")
        raise AssertionError(f"{path} was not built, though scdoc is installed")
    with gzip.open(path, "rt") as f:
        return f.read()


class ManPageTest(unittest.TestCase):
    def test_every_option_of_help_is_in_the_man_page(self):
        roff = man_page_text()
        documented = set(re.findall(r"\\fB(--[a-z][a-z0-9-]*)", roff))
        for sub in ("", "up", "status", "runs", "jobs"):
            argv = [lctest.LASTCALL] + ([sub] if sub else []) + ["--help"]
            out = run(argv)
            self.assertEqual(out.returncode, 0, out.stderr)
            options = long_options(out.stdout)
            self.assertIn("--log-level", options, f"could not read the options of {argv}")
            if sub:
                self.assertIn(f"\\fBlastcall {sub}", roff, f"no section for `lastcall {sub}`")
            missing = sorted(options - documented)
            self.assertEqual(missing, [], f"options of `{' '.join(argv[1:])}` missing from "
                                          "docs/lastcall.1.scd")

    def test_sections_exit_codes_and_environment(self):
        roff = man_page_text()
        for section in ("NAME", "SYNOPSIS", "OPTIONS", "SIGNALS", "EXIT STATUS", "ENVIRONMENT",
                        "FILES"):
            self.assertRegex(roff, rf"(?m)^\.SH {section}$")
        exit_status = roff.split(".SH EXIT STATUS", 1)[1].split(".SH ", 1)[0]
        for code in ("0", "2", "126", "127", "128"):
            self.assertRegex(exit_status, rf"\\fB{code}\\fR")
        environment = roff.split(".SH ENVIRONMENT", 1)[1].split(".SH ", 1)[0]
        for var in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "LISTEN_FDS", "LISTEN_PID", "JOURNAL_STREAM",
                    "TINI_SUBREAPER", "TINI_VERBOSITY", "TINI_KILL_PROCESS_GROUP",
                    "DUMB_INIT_SETSID", "DUMB_INIT_DEBUG"):
            self.assertIn(var, environment.replace("\\_", "_"))


class DebianPackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        skip_in_instrumented_builds()
        require_tools("cpack", "dpkg-deb", "dpkg-shlibdeps", "dpkg", "file")
        cls.tmp = tempfile.mkdtemp(prefix="lctest-deb-")
        config = os.path.join(BUILD, "CPackConfig.cmake")
        if not os.path.exists(config):
            raise AssertionError(f"{config} missing: packaging/CMakeLists.txt did not run")
        started = time.monotonic()
        out = run(["cpack", "--config", config, "-B", cls.tmp], timeout=300)
        sys.stderr.write(f"cpack: {time.monotonic() - started:.1f}s\n")
        if out.returncode != 0:
            raise AssertionError(f"cpack failed:\n{out.stdout}\n{out.stderr}")
        debs = [f for f in os.listdir(cls.tmp) if f.endswith(".deb")]
        if len(debs) != 1:
            raise AssertionError(f"expected one .deb in {cls.tmp}, found {debs}")
        cls.deb = os.path.join(cls.tmp, debs[0])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_contents(self):
        listing = run(["dpkg-deb", "-c", self.deb]).stdout
        paths = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
        for path in ("/usr/bin/lastcall", "/usr/share/man/man1/lastcall.1.gz",
                     "/usr/share/doc/lastcall/README.md", "/usr/share/doc/lastcall/kubernetes.md"):
            self.assertIn(path, paths, listing)
        # Every example unit in the source tree ships (they are found by a glob).
        for name in os.listdir(os.path.join(SOURCE, "systemd")):
            if name.endswith((".service", ".socket")):
                self.assertIn(f"/usr/share/doc/lastcall/examples/systemd/{name}", paths, listing)
        self.assertRegex(listing, r"-rwxr-xr-x root/root .* \./usr/bin/lastcall\n")
        if has_static_build():
            self.assertRegex(listing, r"-rwxr-xr-x root/root .* \./usr/libexec/lastcall/lastcall\n")

    def test_usr_bin_lastcall_is_the_static_binary_and_hands_over_to_the_packaged_twin(self):
        # Issue 18: the binary a user installs starts as catatonit does, with no loader and no
        # libc.so to map and relocate; what only a dynamic binary can do goes to the twin.
        if not has_static_build():
            self.skipTest("this build makes no static binary")
        require_tools("file")
        root = os.path.realpath(tempfile.mkdtemp(prefix="lctest-root-"))
        try:
            self.assertEqual(run(["dpkg", "-x", self.deb, root]).returncode, 0)
            static = os.path.join(root, "usr/bin/lastcall")
            twin = os.path.join(root, "usr/libexec/lastcall/lastcall")
            self.assertIn("statically linked", run(["file", "-L", static]).stdout)
            self.assertIn("dynamically linked", run(["file", "-L", twin]).stdout)
            for argv, runner in (([], static), (["--metrics-listen", "127.0.0.1:0"], twin)):
                out = run([static] + argv + ["--"] + WHO_RUNS, timeout=60)
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertEqual(out.stdout.strip(), runner, argv)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def test_license_and_copyright_are_installed(self):
        root = tempfile.mkdtemp(prefix="lctest-root-")
        try:
            self.assertEqual(run(["dpkg", "-x", self.deb, root]).returncode, 0)
            doc = os.path.join(root, "usr/share/doc/lastcall")
            with open(os.path.join(doc, "LICENSE")) as f:
                license_text = f.read()
            self.assertIn("Apache License", license_text)
            self.assertIn("END OF TERMS AND CONDITIONS", license_text)  # the full text
            with open(os.path.join(doc, "copyright")) as f:
                copyright_text = f.read()
            self.assertTrue(copyright_text.startswith(
                "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"))
            # lastcall's own license, and one paragraph per license a stanza names.
            self.assertRegex(copyright_text, r"(?m)^Files: \*\nCopyright: .*\nLicense: Apache-2.0$")
            named = set(re.findall(r"(?m)^License: (.+)$", copyright_text))
            for name in named:
                self.assertRegex(copyright_text, rf"(?m)^License: {re.escape(name)}\n ",
                                 f"no text for license {name}")
            # Every piece the static binary links in is listed (CMakeLists.txt, packaging/bundled.cmake).
            for piece in ("GNU C Library", "GCC runtime", "SQLite", "spdlog", "{fmt}", "toml++",
                          "nlohmann-json", "CLI11"):
                self.assertIn(piece, copyright_text)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def test_control_fields(self):
        fields = run(["dpkg-deb", "-f", self.deb, "Package", "Version", "Architecture",
                      "Depends"]).stdout
        self.assertIn("Package: lastcall", fields)
        arch = run(["dpkg", "--print-architecture"]).stdout.strip()
        self.assertIn(f"Architecture: {arch}", fields)
        # dpkg-shlibdeps read the binary's NEEDED entries: libc6 with the glibc version the build
        # needs, and the shared libraries of the dynamic build.
        depends = [d.strip() for d in fields.split("Depends:", 1)[1].split(",")]
        self.assertTrue(any(re.fullmatch(r"libc6 \(>= [\d.]+\)", d) for d in depends), depends)
        names = {d.split()[0] for d in depends}
        # spdlog, fmt, toml++, libstdc++ and libgcc are compiled in and libsystemd is not linked
        # (issue 18: their loading was most of the start-up): only libc is loaded at start.
        # SQLite is loaded with dlopen when a run ledger opens: a dependency shlibdeps cannot see.
        self.assertEqual(names, {"libc6", "libsqlite3-0"}, depends)

    def test_binary_is_stripped_and_its_debug_info_is_in_the_dbgsym_package(self):
        require_tools("readelf")
        ddebs = [f for f in os.listdir(self.tmp) if f.endswith(".ddeb")]
        self.assertEqual(len(ddebs), 1, os.listdir(self.tmp))
        root = tempfile.mkdtemp(prefix="lctest-dbg-")
        try:
            self.assertEqual(run(["dpkg", "-x", self.deb, root]).returncode, 0)
            self.assertEqual(run(["dpkg", "-x", os.path.join(self.tmp, ddebs[0]), root]).returncode, 0)
            binaries = ["usr/bin/lastcall"]
            if has_static_build():
                binaries.append("usr/libexec/lastcall/lastcall")  # the twin
            for name in binaries:
                binary = os.path.join(root, name)
                sections = run(["readelf", "-S", "-W", binary]).stdout
                self.assertNotIn(".debug_info", sections, name)
                self.assertIn(".gnu_debuglink", sections, name)
                build_id = re.search(r"Build ID: (\w\w)(\w+)",
                                     run(["readelf", "-n", binary]).stdout)
                self.assertIsNotNone(build_id, name)
                debug = os.path.join(root, "usr/lib/debug/.build-id", build_id.group(1),
                                     build_id.group(2) + ".debug")
                self.assertIn(".debug_info", run(["readelf", "-S", "-W", debug]).stdout, name)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def test_unpacked_binary_runs(self):
        root = tempfile.mkdtemp(prefix="lctest-root-")
        try:
            out = run(["dpkg", "-x", self.deb, root])
            self.assertEqual(out.returncode, 0, out.stderr)
            version = run([os.path.join(root, "usr/bin/lastcall"), "--version"])
            self.assertEqual(version.returncode, 0, version.stderr)
            self.assertRegex(version.stdout, r"^lastcall \d+\.\d+\.\d+\n$")
            man = os.path.join(root, "usr/share/man/man1/lastcall.1.gz")
            with gzip.open(man, "rt") as f:
                self.assertIn(".TH", f.read(4096))
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def test_install_and_remove_with_dpkg_into_a_temporary_root(self):
        if os.geteuid() != 0:
            self.skipTest("dpkg --root needs root")
        root = tempfile.mkdtemp(prefix="lctest-dpkgroot-")
        try:
            admin = os.path.join(root, "var/lib/dpkg")
            os.makedirs(os.path.join(admin, "info"))
            os.makedirs(os.path.join(admin, "updates"))
            open(os.path.join(admin, "status"), "w").close()
            # The empty root has none of the dependencies; they are checked above, on the control
            # file. --force-script-chrootless: there is no shell inside the root to chroot into.
            dpkg = ["dpkg", f"--root={root}", "--force-depends", "--force-script-chrootless",
                    "--log=/dev/null"]
            out = run(dpkg + ["-i", self.deb])
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            status = run(dpkg + ["-s", "lastcall"]).stdout
            self.assertIn("Status: install ok installed", status)
            files = run(dpkg + ["-L", "lastcall"]).stdout.split()
            self.assertIn("/usr/bin/lastcall", files)
            self.assertIn("/usr/share/man/man1/lastcall.1.gz", files)
            version = run([os.path.join(root, "usr/bin/lastcall"), "--version"])
            self.assertEqual(version.returncode, 0, version.stderr)
            out = run(dpkg + ["--purge", "lastcall"])
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertFalse(os.path.exists(os.path.join(root, "usr/bin/lastcall")))
        finally:
            shutil.rmtree(root, ignore_errors=True)


def static_binary():
    """The static lastcall: $LASTCALL_STATIC_BINARY when given, else the build's static/lastcall,
    which the build's default target makes beside the dynamic binary."""
    given = os.environ.get("LASTCALL_STATIC_BINARY")
    if given:
        return given
    skip_in_instrumented_builds()
    if not has_static_build():
        raise unittest.SkipTest("this build makes no static binary (LASTCALL_STATIC off, or "
                                "LASTCALL_SHARED_DEPS on)")
    path = os.path.join(BUILD, "static", "lastcall")
    if not os.access(path, os.X_OK):
        raise AssertionError(f"{path} missing: build the default target first (make build)")
    return path


IDPROBE = r"""
#include <stdio.h>
#include <unistd.h>
int main(void) {
    gid_t groups[64];
    int n = getgroups(64, groups);
    printf("uid=%d gid=%d groups=", (int)getuid(), (int)getgid());
    for (int i = 0; i < n; ++i) printf(i ? ",%d" : "%d", (int)groups[i]);
    printf("\n");
    return 0;
}
"""


class StaticBinaryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = static_binary()
        cls.tmp = tempfile.mkdtemp(prefix="lctest-static-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_is_static(self):
        require_tools("file", "ldd", "readelf")
        self.assertIn("statically linked", run(["file", "-L", self.binary]).stdout)
        ldd = run(["ldd", self.binary])
        self.assertNotEqual(ldd.returncode, 0)
        self.assertIn("not a dynamic executable", ldd.stdout + ldd.stderr)
        headers = run(["readelf", "--program-headers", "--dynamic", self.binary]).stdout
        self.assertNotIn("INTERP", headers)
        self.assertNotIn("(NEEDED)", headers)

    def test_without_its_twin_refuses_what_needs_a_shared_library_with_a_one_line_error(self):
        # core/linkage: the static binary cannot dlopen libmicrohttpd or libpq. Alone (as in a
        # scratch image: no dynamic twin beside it to hand the run to), it says so before
        # starting anything, instead of trying.
        lone = os.path.join(self.tmp, "lone", "lastcall")
        os.makedirs(os.path.dirname(lone))
        shutil.copy(self.binary, lone)
        out = run([lone, "--metrics-listen", "127.0.0.1:0", "--", "/bin/true"], timeout=30)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertEqual(out.stderr.strip().count("\n"), 0, out.stderr)
        self.assertIn("needs libmicrohttpd, which the static build cannot load", out.stderr)

    def test_runs_with_an_empty_environment(self):
        out = run(["env", "-i", self.binary, "--", "/bin/true"], timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        out = run(["env", "-i", self.binary, "--", "/bin/sh", "-c", "exit 7"], timeout=30)
        self.assertEqual(out.returncode, 7, out.stderr)

    def test_ready_datagram_without_libsystemd(self):
        path = os.path.join(self.tmp, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        try:
            env = {"NOTIFY_SOCKET": path, "PATH": "/usr/bin:/bin"}
            out = run([self.binary, "--", "/bin/true"], env=env, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            messages = []
            while select.select([sock], [], [], 0)[0]:
                messages.append(sock.recv(65536).decode().split("\n"))
            self.assertTrue(messages, "no datagram reached NOTIFY_SOCKET")
            self.assertIn("READY=1", messages[0], messages)
            self.assertTrue(any("STOPPING=1" in m for m in messages), messages)
        finally:
            sock.close()

    def test_user_names_from_etc_files_in_an_image_with_no_libc(self):
        # The static binary alone in a root with an /etc/passwd and /etc/group and a static probe:
        # no libc, no NSS modules, as FROM scratch. --user must resolve the name, its primary
        # group and its supplementary groups from the files.
        if os.geteuid() != 0:
            self.skipTest("chroot and --user need root")
        require_tools("cc")
        root = os.path.join(self.tmp, "scratch")
        os.makedirs(os.path.join(root, "etc"))
        os.makedirs(os.path.join(root, "proc"))
        src = os.path.join(self.tmp, "idprobe.c")
        with open(src, "w") as f:
            f.write(IDPROBE)
        out = run(["cc", "-static", "-O1", "-o", os.path.join(root, "idprobe"), src])
        self.assertEqual(out.returncode, 0, out.stderr)
        shutil.copy(self.binary, os.path.join(root, "lastcall"))
        with open(os.path.join(root, "etc/passwd"), "w") as f:
            f.write("root:x:0:0:root:/:/idprobe\n# a comment\napp:x:4242:4343::/:/idprobe\n")
        with open(os.path.join(root, "etc/group"), "w") as f:
            f.write("root:x:0:\napp:x:4343:\nextra:x:4444:root,app\nother:x:4545:nobody\n")
        # An NSS configuration whose module does not exist here: glibc's NSS (getpwnam in a static
        # binary) finds nobody with it, so the test passes only if the files are read directly.
        with open(os.path.join(root, "etc/nsswitch.conf"), "w") as f:
            f.write("passwd: ldap\ngroup: ldap\n")
        # A private mount namespace gets the chroot its own /proc (the tree tracker reads it)
        # without touching the host's mounts.
        script = ('mount -t proc proc "$1/proc" && exec chroot "$1" /lastcall --tracker proc '
                  '--user "$2" -- /idprobe')
        for spec, expected in (("app", "uid=4242 gid=4343 groups=4343,4444"),
                               ("app:extra", "uid=4242 gid=4444 groups=4444"),
                               ("4000:4001", "uid=4000 gid=4001 groups=4001")):
            out = run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                       root, spec], timeout=30, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout.strip(), expected, out.stderr)
        out = run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                   root, "nosuchuser"], timeout=30)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("no such user 'nosuchuser'", out.stderr)


def twin_of(binary):
    """Where a static lastcall looks for its dynamic twin (core/twin.hpp): beside it as the .deb
    installs them, ../libexec/lastcall/lastcall from its own directory."""
    return os.path.normpath(os.path.join(os.path.dirname(os.path.realpath(binary)), "..",
                                         "libexec", "lastcall", "lastcall"))


# The child's parent is lastcall itself: /proc/PPID/exe names the binary that is running it, the
# static one or the twin it handed over to (the same PID: execve keeps it).
WHO_RUNS = ["sh", "-c", 'readlink "/proc/$PPID/exe"']


class StaticTwinTest(unittest.TestCase):
    """The static binary hands what it cannot do (libpq, libmicrohttpd, NSS) to its dynamic
    twin, before starting anything, and everything else stays its own."""

    @classmethod
    def setUpClass(cls):
        cls.binary = static_binary()
        cls.twin = twin_of(cls.binary)
        if not os.access(cls.twin, os.X_OK):
            raise unittest.SkipTest(f"no dynamic twin at {cls.twin}")
        cls.twin_real = os.path.realpath(cls.twin)
        cls.tmp = tempfile.mkdtemp(prefix="lctest-twin-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def runner_of(self, argv, **kw):
        out = run([self.binary] + argv + ["--"] + WHO_RUNS, timeout=60, **kw)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.strip()

    def test_a_plain_run_stays_in_the_static_binary(self):
        self.assertEqual(self.runner_of([]), os.path.realpath(self.binary))

    def test_metrics_listen_is_handed_to_the_twin_which_serves_it(self):
        out = run([self.binary, "-v", "--metrics-listen", "127.0.0.1:0", "--"] + WHO_RUNS,
                  timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), self.twin_real)
        self.assertIn("handed over by the static binary: --metrics-listen needs libmicrohttpd",
                      out.stderr)
        self.assertIn("metrics: serving /metrics on 127.0.0.1:", out.stderr)

    def test_the_child_gets_the_mask_the_first_binarys_parent_set_and_no_hand_over_variable(self):
        # tini mode hands its caller's signal mask to the child. The static binary has blocked
        # every signal it handles by the time it hands over; the twin must pass on the caller's.
        def caller_state():
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2})

        # grep reads its own mask: a shell in between would clear it (dash does).
        out = run([self.binary, "--metrics-listen", "127.0.0.1:0", "--compat", "tini", "-s", "--",
                   "grep", "SigBlk", "/proc/self/status"], timeout=60,
                  preexec_fn=caller_state, restore_signals=False)
        self.assertEqual(out.returncode, 0, out.stderr)
        blocked = int(re.search(r"SigBlk:\s*(\w+)", out.stdout).group(1), 16)
        for sig in (signal.SIGUSR1, signal.SIGUSR2):
            self.assertTrue(blocked & (1 << (sig - 1)), out.stdout)
        # What the static binary had blocked itself is not passed on.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            self.assertFalse(blocked & (1 << (sig - 1)), out.stdout)
        env = run([self.binary, "--metrics-listen", "127.0.0.1:0", "--", "env"], timeout=60)
        self.assertEqual(env.returncode, 0, env.stderr)
        self.assertNotIn("LASTCALL_HANDED_OVER", env.stdout)

    def test_the_twin_keeps_the_process_name_it_was_started_by(self):
        # ps, pgrep -x and pidof know lastcall by the name it was executed as; the twin's own
        # file name would replace it.
        link = os.path.join(self.tmp, "myinit")
        if not os.path.lexists(link):
            os.symlink(os.path.realpath(self.binary), link)
        out = run([link, "--metrics-listen", "127.0.0.1:0", "--", "sh", "-c",
                   'cat "/proc/$PPID/comm"; readlink "/proc/$PPID/exe"'], timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["myinit", self.twin_real])

    def test_a_stray_hand_over_variable_is_not_taken_for_one(self):
        # Left in the environment by someone else (another PID): ignored, removed, and this
        # static binary still hands over itself.
        env = dict(os.environ, LASTCALL_HANDED_OVER="1\n0\n0.0.0\nx\nstray")
        out = run([self.binary, "-v", "--metrics-listen", "127.0.0.1:0", "--", "sh", "-c",
                   'readlink "/proc/$PPID/exe"; env'], timeout=60, env=env)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.splitlines()[0], self.twin_real)
        self.assertNotIn("LASTCALL_HANDED_OVER", out.stdout)
        self.assertNotIn("stray", out.stderr)

    def test_a_crontab_read_from_a_pipe_is_handed_over_unread(self):
        # The twin reads its inputs again: a pipe read by the static binary first would reach
        # the twin empty, and its jobs would silently be gone.
        script = 'b=$1; shift; "$b" --crontab <(printf "17 3 * * * echo hi\\n") "$@"'
        out = run(["bash", "-c", script, "bash", self.binary, "-v", "--state-dir", self.tmp,
                   "--metrics-listen", "127.0.0.1:0", "--", "/bin/true"], timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("handed over by the static binary", out.stderr)
        self.assertRegex(out.stderr, r"job echo-\S*: schedule '17 3 \* \* \*'")

    def test_a_cron_d_directory_stays_in_the_static_binary(self):
        # Read again as well as a file: not a reason to pay the twin's start-up (its user may
        # be, where NSS names more than files: that hand-over is another test's).
        crond = os.path.join(self.tmp, "cron.d")
        os.makedirs(crond, exist_ok=True)
        with open(os.path.join(crond, "nightly"), "w") as f:
            f.write("17 3 * * * root echo hi\n")
        out = run([self.binary, "-v", "--crontab", crond, "--state-dir", self.tmp, "--", "true"],
                  timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn("is not a regular file", out.stderr)
        self.assertRegex(out.stderr, r"job \S+: schedule '17 3 \* \* \*'")

    def test_socket_activation_survives_the_hand_over(self):
        from test_systemd_notify import CHILD_REPORT
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(os.path.join(self.tmp, "activated.sock"))
        listener.listen()
        fd = listener.fileno()
        events = os.path.join(self.tmp, "activation.json")
        wrapper = f'LISTEN_PID=$$ LISTEN_FDS=1 exec "$@" 3<&{fd} {fd}<&-'
        out = run(["sh", "-c", wrapper, "sh", self.binary, "-v", "--metrics-listen",
                   "127.0.0.1:0", "--", "/usr/bin/python3", "-c", CHILD_REPORT], timeout=60,
                  pass_fds=[fd], env=dict(os.environ, EVENTS=events))
        listener.close()
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("handed over by the static binary", out.stderr)
        with open(events) as f:
            report = json.loads(f.readline())
        self.assertEqual(report["listen_pid"], str(report["pid"]))
        self.assertEqual(report["listen_fds"], "1")
        self.assertTrue(report["is_socket"])
        self.assertEqual(report["listening"], 1)
        self.assertEqual(report["fds"], [0, 1, 2, 3], "descriptors leaked through the hand-over")

    def test_a_twin_that_is_the_static_binary_again_is_not_run_twice(self):
        # A broken install whose "twin" is the static binary: one exec, then the static
        # binary's own one-line error, never an exec loop.
        root = os.path.join(self.tmp, "loop")
        os.makedirs(os.path.join(root, "bin"))
        os.makedirs(os.path.join(root, "libexec", "lastcall"))
        shutil.copy(self.binary, os.path.join(root, "bin", "lastcall"))
        os.symlink("../../bin/lastcall", os.path.join(root, "libexec", "lastcall", "lastcall"))
        out = run([os.path.join(root, "bin", "lastcall"), "--metrics-listen", "127.0.0.1:0",
                   "--", "/bin/true"], timeout=30)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("needs libmicrohttpd, which the static build cannot load", out.stderr)

    def test_a_postgresql_ledger_is_handed_to_the_twin(self):
        crontab = os.path.join(self.tmp, "crontab")
        with open(crontab, "w") as f:
            f.write("@hourly /bin/true\n")
        out = run([self.binary, "-v", "--crontab", crontab, "--state-dir", self.tmp, "--ledger",
                   "postgresql://127.0.0.1:1/none?connect_timeout=5", "--", "/bin/true"],
                  timeout=60)
        self.assertIn("handed over by the static binary: a postgresql:// ledger needs libpq",
                      out.stderr)
        self.assertNotIn("cannot load", out.stderr)

    def test_as_pid_1_the_twin_is_pid_1(self):
        # A container's ENTRYPOINT: execve keeps PID 1, so the twin reaps and forwards as init.
        if run(["unshare", "--pid", "--fork", "--mount-proc", "true"]).returncode != 0:
            self.skipTest("unshare --pid is not allowed here")
        out = run(["unshare", "--pid", "--fork", "--mount-proc", self.binary, "--metrics-listen",
                   "127.0.0.1:0", "--", "sh", "-c",
                   'echo "$PPID"; readlink /proc/1/exe; sh -c "exit 3" & wait; exit 5'],
                  timeout=60)
        self.assertEqual(out.returncode, 5, out.stderr)
        self.assertEqual(out.stdout.split(), ["1", self.twin_real])

    def test_the_runs_subcommand_hands_a_postgresql_ledger_to_the_twin(self):
        out = run([self.binary, "runs", "--ledger",
                   "postgresql://127.0.0.1:1/none?connect_timeout=5"], timeout=60)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertNotIn("cannot load", out.stderr)
        self.assertIn("connect:", out.stderr)  # libpq's answer: the twin loaded it

    def test_runs_with_a_piped_config_naming_a_postgresql_ledger_reaches_the_twin_unread(self):
        config = ('ledger = "postgresql://127.0.0.1:1/none?connect_timeout=5"\n'
                  '[jobs.a]\nschedule = "@hourly"\ncommand = "true"\n')
        out = run(["bash", "-c", 'exec "$1" runs --config <(printf "%s" "$2")', "bash",
                   self.binary, config], timeout=60)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("connect:", out.stderr)  # the twin read the config and loaded libpq

    def nss_run(self, nsswitch, args=None):
        """Who ran `lastcall --user nobody -- id -u` (static binary or twin) with this
        nsswitch.conf, bound over the host's in a private mount namespace. The child runs as
        nobody and cannot read lastcall's /proc/PID/exe: the twin's debug line says it."""
        if os.geteuid() != 0:
            self.skipTest("a private /etc/nsswitch.conf needs a mount namespace (root)")
        if not os.path.exists("/etc/nsswitch.conf"):
            self.skipTest("no /etc/nsswitch.conf to bind a test one over")
        if run(["unshare", "--mount", "true"]).returncode != 0:
            self.skipTest("unshare --mount is not allowed here")
        conf = os.path.join(self.tmp, "nsswitch.conf")
        with open(conf, "w") as f:
            f.write(nsswitch)
        script = 'mount --bind "$1" /etc/nsswitch.conf && shift && exec "$@"'
        argv = args or ["--user", "nobody", "--", "id", "-u"]
        out = run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                   conf, self.binary, "-v"] + argv, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        if not args:
            self.assertEqual(out.stdout.strip(), str(pwd.getpwnam("nobody").pw_uid))
        handed = "handed over by the static binary: NSS names more user databases" in out.stderr
        return "twin" if handed else "static"

    def test_a_services_user_in_the_config_is_looked_up_by_the_twin_too(self):
        config = os.path.join(self.tmp, "services.toml")
        with open(config, "w") as f:
            f.write('[services.s]\ncommand = "true"\nuser = "nobody"\n')
        self.assertEqual(self.nss_run("passwd: files ldap\ngroup: files\n",
                                      ["--config", config, "--", "true"]), "twin")

    def test_user_lookups_go_to_the_twin_where_nss_names_more_than_files(self):
        self.assertEqual(self.nss_run("passwd: files systemd\ngroup: files systemd\n"), "twin")
        self.assertEqual(self.nss_run("passwd: files\ngroup: files\ninitgroups: files sss\n"),
                         "twin")

    def test_user_lookups_stay_in_the_static_binary_where_nss_is_files_only(self):
        self.assertEqual(self.nss_run("passwd: files\ngroup: files\n"), "static")


class DeploymentExamplesTest(unittest.TestCase):
    def test_dockerfiles_run_lastcall_as_entrypoint(self):
        for name in ("Dockerfile.debian", "Dockerfile.scratch"):
            with open(os.path.join(SOURCE, "packaging", name)) as f:
                text = f.read()
            self.assertRegex(text, r'(?m)^ENTRYPOINT \["lastcall", "--"\]$', name)
        with open(os.path.join(SOURCE, "packaging", "Dockerfile.scratch")) as f:
            self.assertRegex(f.read(), r"(?m)^FROM scratch$")

    def test_kubernetes_grace_period_covers_drain_delay_and_grace(self):
        with open(os.path.join(SOURCE, "packaging", "kubernetes-pod.yaml")) as f:
            text = f.read()
        period = int(re.search(r"terminationGracePeriodSeconds:\s*(\d+)", text).group(1))

        def seconds(option):
            m = re.search(rf"--{option}[= ](\d+)s\b", text)
            self.assertIsNotNone(m, f"--{option} in seconds not found in the pod example")
            return int(m.group(1))

        grace, drain = seconds("grace"), seconds("drain-delay")
        self.assertLessEqual(drain, grace, "the drain delay is spent inside the grace")
        # The margin covers lastcall's SIGKILL, reap (up to 5 s for D-state processes) and report.
        self.assertGreaterEqual(period, grace + 10)
        # The options are valid for this lastcall.
        out = run([lctest.LASTCALL, f"--grace={grace}s", f"--drain-delay={drain}s", "--",
                   "/bin/true"], timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)

    def test_the_replicas_example_shares_one_ledger_and_its_config_loads(self):
        with open(os.path.join(SOURCE, "packaging", "kubernetes-replicas.yaml")) as f:
            text = f.read()
        # The ConfigMap's lastcall.toml (a literal block, indented 4): what lastcall reads.
        lines = text.split("\n")
        start = lines.index("  lastcall.toml: |") + 1
        block = []
        for line in lines[start:]:
            if line and not line.startswith("    "):
                break
            block.append(line[4:])
        config = os.path.join(tempfile.mkdtemp(), "lastcall.toml")
        with open(config, "w") as f:
            f.write("\n".join(block))
        out = run([lctest.LASTCALL, "jobs", "--config", config], timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("report", out.stdout)
        # Every replica names the same ledger and its own id, and the kubelet waits for the grace.
        # The URL holds no password (it would be in /proc/PID/cmdline): PGPASSWORD, a Secret's.
        self.assertRegex(text, r'"--ledger", "postgresql://lastcall@postgres:5432/myapp"')
        self.assertRegex(text, r"- name: PGPASSWORD\n +valueFrom:\n +secretKeyRef:")
        self.assertNotIn("LASTCALL_LEDGER_URL", text)
        self.assertRegex(text, r'"--replica-id", "\$\(POD_NAME\)"')
        self.assertRegex(text, r"(?m)^  replicas: 3$")
        period = int(re.search(r"terminationGracePeriodSeconds:\s*(\d+)", text).group(1))
        grace = int(re.search(r'"--grace", "(\d+)s"', text).group(1))
        self.assertGreaterEqual(period, grace + 10)


if __name__ == "__main__":
    unittest.main()
