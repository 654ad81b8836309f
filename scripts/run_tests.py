#!/usr/bin/env python3
"""Runs the workspace's test binaries, already built, in lanes beside one another.

Most of the suite's time is spent waiting on lease timings in real time, one binary after
another under `cargo test`. Here the binaries that wait run in `--lanes` lanes at once, and
the CPU-bound packages' binaries (`--serial-package`, the simulator's) run one after another
in a lane of their own, as `cargo test` would run them, beside the rest. That lane first
builds them, in `--serial-profile` if given (an optimized one: the CPU it spends compiling
beside the waiting lanes comes back many times over in the runs). Doctests run as one
job per selection, through `cargo test --doc`. All of those only use the CPU, and run at
the same priority as the rest.
`--job NAME=COMMAND` adds a shell command (the guide's build, the browser test) to the
lanes, after every test binary.

A binary whose sources stop, pause or restart a shared store server (they read the variables
or helpers that control it) runs with no other lane's binary beside it: a server going away
would fail the tests of any binary using it at that moment. One that fails may have failed
with a server still stopped: `--revive COMMAND` then runs before any other binary starts,
so that one failure does not fail every binary after it that uses that server.

Each binary runs as `cargo test` runs it: from its package's directory, with the package's
variables. Its output is printed whole once it ends, so that lanes do not interleave; every
binary runs even when another fails; the failing tests (or binaries, when one fails without
naming a test) are written to `--failures`, one per line. A binary that runs longer than
`--timeout` seconds is killed with its processes, and named as failed.

Durations are written to target/test-times.tsv after each run, and read from there (or from
scripts/test-times.tsv, in a fresh clone) to start the longest binaries first.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What a test file reads to stop, pause or restart a shared server (scripts/services/*.sh
# export these).
DISTURBS_SERVERS = re.compile(
    r"LEASEHOLD_TEST_POSTGRES_(STOP|START)|LEASEHOLD_TEST_ETCD_PIDS_DIR"
    r"|LEASEHOLD_TEST_ZOOKEEPER_CTL|zookeeper_control\("
)

FAILED_TEST = re.compile(r"^test (.*) \.\.\. FAILED$")


class Job:
    """One test binary, or one selection's doctests."""

    def __init__(self, name, command, cwd, env, source=None):
        self.name = name
        self.command = command
        self.cwd = cwd
        self.env = env
        self.alone = source is not None and disturbs_servers(source)
        self.status = None
        self.seconds = 0.0
        self.output = ""


def disturbs_servers(source):
    """Whether a test target's sources (its file, or its directory for a `main.rs`) control
    a shared server."""
    path = Path(source)
    files = sorted(path.parent.rglob("*.rs")) if path.name == "main.rs" else [path]
    return any(DISTURBS_SERVERS.search(f.read_text(errors="replace")) for f in files)


class BuildFailed(Exception):
    pass


def test_executables(selection, cargo_args):
    """The test executables of a selection, from cargo's build messages: the tests are
    built already, so this only reads them."""
    command = ["cargo", "test", *selection, *cargo_args, "--no-run", "--message-format=json"]
    run = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if run.returncode != 0:
        raise BuildFailed(f"`{' '.join(command)}` failed ({run.returncode})")
    jobs = []
    for line in run.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        target = message["target"]
        package_dir = Path(message["manifest_path"]).parent
        package = package_dir.name
        relative = os.path.relpath(target["src_path"], package_dir)
        # The tests read cargo's variables when they are compiled (`env!`); this one, which
        # cargo also sets for a test it runs, is the one a test could read at run time.
        env = dict(os.environ, CARGO_MANIFEST_DIR=str(package_dir))
        jobs.append(
            Job(
                f"{package} {relative}",
                [message["executable"]],
                package_dir,
                env,
                target["src_path"] if "test" in target["kind"] else None,
            )
        )
    return jobs


def doctests(selection, cargo_args):
    """The doctests of a selection, as one job."""
    command = ["cargo", "test", *selection, *cargo_args, "--doc"]
    name = f"doctests of {' '.join(selection)}"
    return Job(name, command, ROOT, dict(os.environ))


def load_times():
    for path in (ROOT / "target/test-times.tsv", ROOT / "scripts/test-times.tsv"):
        if path.exists():
            times = {}
            for line in path.read_text().splitlines():
                name, _, seconds = line.rpartition("\t")
                try:
                    times[name] = float(seconds)
                except ValueError:
                    pass
            return times
    return {}


class Runner:
    def __init__(self, lanes, timeout, revive=None):
        self.lanes = lanes
        self.timeout = timeout
        self.revive = revive
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.running = 0
        self.alone_running = False
        self.done = []
        self.start = time.monotonic()
        # Process groups running now, for `stop`.
        self.groups = set()

    def stop(self, signum, _frame):
        """Stops every running binary with its processes, then exits: an interrupted run
        leaves no test processes (and no servers they started) behind."""
        with self.lock:
            for group in self.groups:
                try:
                    os.killpg(group, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        os._exit(128 + signum)

    def run(self, job):
        began = time.monotonic()
        with tempfile.TemporaryFile(mode="w+", errors="replace") as log:
            try:
                process = subprocess.Popen(
                    job.command,
                    cwd=job.cwd,
                    env=job.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as error:
                job.status = f"could not start: {error}"
            else:
                with self.lock:
                    self.groups.add(process.pid)
                try:
                    job.status = process.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    job.status = f"killed after {self.timeout} s"
                # The binary's own children (servers, nodes) go with it.
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
                with self.lock:
                    self.groups.discard(process.pid)
            log.seek(0)
            job.output = log.read()
        job.seconds = time.monotonic() - began
        with self.lock:
            self.done.append(job)
            at = time.monotonic() - self.start
            ok = "ok" if job.status == 0 else f"FAILED ({job.status})"
            print(f"\n── {job.name}: {ok} in {job.seconds:.1f} s (at {at:.0f} s)", flush=True)
            sys.stdout.write(job.output)
            sys.stdout.flush()

    def revive_servers(self, job):
        """Starts again the servers a failed server-stopping binary may have left stopped
        (each service's start waits a minute at most; the whole gets ten)."""
        try:
            revived = subprocess.run(
                ["bash", "-c", self.revive],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=600,
            )
            outcome, output = f"exited {revived.returncode}", revived.stdout
        except subprocess.TimeoutExpired as expired:
            outcome, output = "was stopped after 600 s", expired.stdout or ""
        with self.lock:
            print(f"\n── after {job.name} failed: `{self.revive}` {outcome}")
            sys.stdout.write(output if isinstance(output, str) else output.decode(errors="replace"))
            sys.stdout.flush()

    def pool(self, jobs):
        """Runs jobs in `lanes` threads, the ones that must run alone before the rest."""
        queue = [j for j in jobs if j.alone] + [j for j in jobs if not j.alone]

        def lane():
            while True:
                with self.changed:
                    while True:
                        if not queue:
                            return
                        job = queue[0]
                        if not self.alone_running and (not job.alone or self.running == 0):
                            break
                        self.changed.wait()
                    queue.pop(0)
                    self.running += 1
                    self.alone_running = job.alone
                self.run(job)
                if job.alone and job.status != 0 and self.revive:
                    self.revive_servers(job)
                with self.changed:
                    self.running -= 1
                    self.alone_running = False
                    self.changed.notify_all()

        threads = [threading.Thread(target=lane) for _ in range(self.lanes)]
        for thread in threads:
            thread.start()
        return threads


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--serial-package", action="append", default=[])
    parser.add_argument("--serial-profile", metavar="PROFILE")
    parser.add_argument("--timeout", type=int, default=1200)
    parser.add_argument("--revive", metavar="COMMAND")
    parser.add_argument("--failures", required=True)
    parser.add_argument("--job", action="append", default=[], metavar="NAME=COMMAND")
    parser.add_argument("cargo_args", nargs="*")
    args = parser.parse_args()
    if args.lanes < 1:
        sys.exit("run_tests.py: --lanes must be at least 1")

    excluded = [a for p in args.serial_package for a in ("--exclude", p)]
    rest_selection = ["--workspace", *excluded]
    serial_selection = [a for p in args.serial_package for a in ("-p", p)]
    times = load_times()

    def longest_first(jobs):
        return sorted(jobs, key=lambda j: -times.get(j.name, 0.0))

    try:
        rest = longest_first(test_executables(rest_selection, args.cargo_args))
    except BuildFailed as error:
        sys.exit(f"run_tests.py: {error}")
    rest.append(doctests(rest_selection, args.cargo_args))
    # Last: they wait for tools that compile at a low priority while the binaries run.
    for spec in args.job:
        name, separator, command = spec.partition("=")
        if not separator or not name or not command:
            sys.exit(f"run_tests.py: --job takes NAME=COMMAND, not {spec!r}")
        rest.append(Job(name, ["bash", "-c", command], ROOT, dict(os.environ)))
    serial_args = list(args.cargo_args)
    if args.serial_profile:
        serial_args += ["--profile", args.serial_profile]
    print(
        f"run_tests.py: {len(rest)} jobs in {args.lanes} lanes, "
        f"{' '.join(serial_selection) or 'nothing'} built and run beside them in one lane; "
        f"alone: {', '.join(j.name for j in rest if j.alone) or 'none'}",
        flush=True,
    )

    runner = Runner(args.lanes, args.timeout, args.revive)
    signal.signal(signal.SIGTERM, runner.stop)
    signal.signal(signal.SIGINT, runner.stop)

    def serial_lane():
        if not serial_selection:
            return
        build = ["cargo", "test", *serial_selection, *serial_args, "--no-run"]
        job = Job(f"build of {' '.join(serial_selection)}", build, ROOT, dict(os.environ))
        runner.run(job)
        if job.status != 0:
            return
        try:
            serial = test_executables(serial_selection, serial_args)
        except BuildFailed as error:
            job.status, job.output = 1, str(error)
            return
        serial.append(doctests(serial_selection, serial_args))
        for job in serial:
            # The serial lane runs beside the others whatever they do.
            if job.alone:
                job.status = "not run: it stops a shared server, and cannot run serially"
                with runner.lock:
                    runner.done.append(job)
            else:
                runner.run(job)

    threads = runner.pool(rest)
    serial_thread = threading.Thread(target=serial_lane)
    serial_thread.start()
    for thread in [*threads, serial_thread]:
        thread.join()

    failures = []
    for job in runner.done:
        if job.status == 0:
            continue
        tests = sorted({m.group(1) for m in map(FAILED_TEST.match, job.output.splitlines()) if m})
        failures += [f"{job.name}: {test}" for test in tests]
        if not tests:
            failures.append(f"{job.name}: exited with {job.status}")
    Path(args.failures).write_text("".join(f"{f}\n" for f in failures))

    (ROOT / "target").mkdir(exist_ok=True)
    slowest = sorted(runner.done, key=lambda j: -j.seconds)
    (ROOT / "target/test-times.tsv").write_text(
        "".join(f"{j.name}\t{j.seconds:.1f}\n" for j in slowest)
    )
    print("\nrun_tests.py: slowest binaries:")
    for job in slowest[:10]:
        print(f"  {job.seconds:7.1f} s  {job.name}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
