#!/usr/bin/env python3
"""A worker beside `leasehold agent`: it works on the partitions its agent holds, one short
unit at a time, each unit under a work permit, and records every unit in a log together with
the permit's epoch as the fencing token.

    .venv/bin/python examples/python-worker/worker.py --agent http://127.0.0.1:7464 \\
        --token-file token --log work.log --name worker-1

Standard library only, besides the client `leasehold_agent`: install it first, into the
virtual environment that runs this, with `pip install ./clients/python`.

The agent's lease events say when to start and stop; the permits decide. A unit starts only
under a permit whose deadline, counted on this process's monotonic clock from the moment the
permit was requested, lies beyond the unit's expected end. Events and lease lists are hints
that can be late or lost; a refused permit is the answer that counts.
"""

import argparse
import http.client
import json
import logging
import os
import signal
import sys
import threading
import time

from leasehold_agent import Agent, AgentError, NotOwner

# What a vanished, restarting or wedged agent looks like to urllib: refused or reset
# connections and timeouts (OSError, URLError among them), or a reply cut off mid-way.
CONNECTION_ERRORS = (OSError, http.client.HTTPException)

# Reconnecting to the agent: the first wait, and the cap the doubling stops at.
BACKOFF_FIRST = 0.1
BACKOFF_CAP = 2.0
# The agent sends a keep-alive every 15 s: a stream silent for longer is dead.
STREAM_IDLE_LIMIT = 35.0
# How often the held leases are listed, to start work an event was never seen for.
RECONCILE_EVERY = 2.0
# How long shutdown waits for each partition's unit in flight and its permit's end.
STOP_LIMIT = 10.0

log = logging.getLogger("worker")


class Sink:
    """Where the work's results go: one JSON line per unit, carrying the permit's epoch.

    A shared resource would compare each epoch with the highest it accepted for the
    partition and refuse a lower one; this log only records it, so that the order of epochs
    and the times of the units can be checked afterwards across workers. Times are wall
    clock nanoseconds, comparable between processes on one host.
    """

    def __init__(self, path, worker):
        self._worker = worker
        self._lock = threading.Lock()
        # Line-buffered appends: a killed worker leaves whole lines behind.
        self._file = open(path, "a", encoding="utf-8", buffering=1)

    def write(self, partition, epoch, start_ns, end_ns):
        line = json.dumps(
            {
                "worker": self._worker,
                "partition": partition,
                "epoch": epoch,
                "start_ns": start_ns,
                "end_ns": end_ns,
            }
        )
        with self._lock:
            self._file.write(line + "\n")


class PartitionWork(threading.Thread):
    """Units of work on one partition, for as long as the agent grants permits for it."""

    def __init__(self, agent, partition, sink, unit, predecessor):
        super().__init__(name=f"partition-{partition}", daemon=True)
        self.agent = agent
        self.partition = partition
        self.sink = sink
        self.unit = unit
        # A new permit is taken while the current one still covers this unit and the
        # request for the next, so that work runs on without a gap.
        self.renew_within = 2 * unit + 0.05
        # Work on a partition this worker stopped and restarted waits for the old thread's
        # last unit, so that one partition never has two units running here at once.
        self.predecessor = predecessor
        self._stop_requested = threading.Event()

    def stop(self):
        """Finish the unit in flight, end the permit, and start no other unit."""
        self._stop_requested.set()

    def stopping(self):
        return self._stop_requested.is_set()

    def run(self):
        if self.predecessor is not None:
            self.predecessor.join()
        permit = None
        try:
            while not self._stop_requested.is_set():
                if permit is None or permit.remaining() < self.renew_within:
                    fresh = self.agent.permit(self.partition)
                    # The old permit ends only once the new one holds the tenure open.
                    self._end(permit)
                    permit = fresh
                if not self._work_one_unit(permit):
                    # Even a fresh permit is too short: the lease runs out unless the agent
                    # renews it. Ask again shortly; a refusal ends this.
                    self._end(permit)
                    permit = None
                    self._stop_requested.wait(self.unit)
        except NotOwner:
            log.info("partition %d: not held here any more; stopped", self.partition)
        except AgentError as refusal:
            log.info("partition %d: permit refused (%s); stopped", self.partition, refusal)
        except CONNECTION_ERRORS as error:
            log.warning("partition %d: agent unreachable (%s); stopped", self.partition, error)
        finally:
            self._end(permit)

    def _work_one_unit(self, permit):
        """One unit under `permit`, if it ends before the permit's deadline; whether it ran."""
        # The deadline was counted from when the permit was requested, so it can only be
        # early; the unit must be over by then on the same monotonic clock. A unit that
        # overruns (a pause, an overloaded host) can still end late: that is what the epoch
        # is for, at a sink that checks it.
        if not permit.valid() or time.monotonic() + self.unit >= permit.deadline:
            return False
        start_ns = time.time_ns()
        time.sleep(self.unit)  # the simulated task
        end_ns = time.time_ns()
        self.sink.write(self.partition, permit.epoch, start_ns, end_ns)
        return True

    def _end(self, permit):
        if permit is None:
            return
        try:
            permit.end()
        except (AgentError,) + CONNECTION_ERRORS as error:
            # An agent that is gone holds nothing open; one that is slow drops the permit
            # when the lease ends.
            log.warning(
                "partition %d: could not end permit %s (%s)", self.partition, permit.id, error
            )


class Supervisor:
    """The partition threads: at most one running per partition, none after `close`."""

    def __init__(self, agent, sink, unit):
        self._agent = agent
        self._sink = sink
        self._unit = unit
        self._lock = threading.Lock()
        self._work = {}
        self._closed = False

    def start(self, partition):
        with self._lock:
            if self._closed:
                return
            current = self._work.get(partition)
            if current is not None and current.is_alive() and not current.stopping():
                return
            predecessor = current if current is not None and current.is_alive() else None
            work = PartitionWork(self._agent, partition, self._sink, self._unit, predecessor)
            self._work[partition] = work
            work.start()
            log.info("partition %d: working", partition)

    def stop(self, partition):
        with self._lock:
            work = self._work.get(partition)
            if work is not None and not work.stopping():
                work.stop()
                log.info("partition %d: stopping", partition)

    def stop_all(self):
        with self._lock:
            for work in self._work.values():
                work.stop()

    def close(self):
        """Stops every partition and waits, bounded, for their units and permits to end."""
        with self._lock:
            self._closed = True
            running = list(self._work.values())
        for work in running:
            work.stop()
        deadline = time.monotonic() + STOP_LIMIT
        for work in running:
            work.join(max(0.0, deadline - time.monotonic()))


def follow(agent, supervisor, stopping):
    """Follows the agent's lease events, reconnecting with capped backoff; while the agent
    cannot be reached, nothing is worked on."""
    backoff = BACKOFF_FIRST
    while not stopping.is_set():
        try:
            with agent.open_events(timeout=STREAM_IDLE_LIMIT) as stream:
                # Subscribed first, listed next: a lease taken in between is in both, and
                # starting twice is harmless.
                for lease in agent.leases():
                    supervisor.start(lease["partition"])
                log.info("following the agent's events")
                backoff = BACKOFF_FIRST
                for event in stream:
                    if event["kind"] == "acquired":
                        supervisor.start(event["partition"])
                    else:
                        # releasing, lost, released: the permit for new work would be refused
                        # anyway; stopping now also ends the current one, which a hand-off
                        # waits for.
                        supervisor.stop(event["partition"])
            why = "the agent closed the event stream"
        except (AgentError, ValueError, KeyError) + CONNECTION_ERRORS as error:
            # Refused (the agent not ready yet, or this reader too slow), unreachable, or a
            # stream that makes no sense: all the same, start again from a fresh list.
            why = str(error) or type(error).__name__
        supervisor.stop_all()
        if stopping.is_set():
            return
        log.warning("lost the agent (%s): all work stopped; retrying in %.1f s", why, backoff)
        stopping.wait(backoff)
        backoff = min(backoff * 2, BACKOFF_CAP)


def reconcile(agent, supervisor, stopping):
    """Starts work on every lease the agent lists, in case its event was missed; a partition
    that is no longer held is refused its first permit and stops again."""
    while not stopping.wait(RECONCILE_EVERY):
        try:
            leases = agent.leases()
        except (AgentError, ValueError) + CONNECTION_ERRORS:
            continue
        for lease in leases:
            supervisor.start(lease["partition"])


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agent", default="http://127.0.0.1:7464", help="the agent's URL")
    parser.add_argument("--token-file", help="file holding the agent's bearer token")
    parser.add_argument("--log", default="work.log", help="the work log to append to")
    parser.add_argument(
        "--name", default=f"worker-{os.getpid()}", help="this worker's name in the log"
    )
    parser.add_argument(
        "--unit-ms", type=int, default=30, help="how long one unit of work takes, in ms"
    )
    args = parser.parse_args(argv)
    if args.unit_ms <= 0:
        parser.error("--unit-ms must be positive")
    return args


def main(argv):
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {args.name} %(message)s",
        stream=sys.stderr,
    )
    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as file:
            token = file.read().strip()
    # Blocked before any thread starts, so every thread inherits the mask and the signals
    # wait for `sigwait` below instead of interrupting a thread mid-unit.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})

    agent = Agent(args.agent, token=token)
    sink = Sink(args.log, args.name)
    supervisor = Supervisor(agent, sink, args.unit_ms / 1000.0)
    stopping = threading.Event()
    for target in (follow, reconcile):
        threading.Thread(target=target, args=(agent, supervisor, stopping), daemon=True).start()

    received = signal.sigwait({signal.SIGTERM, signal.SIGINT})
    log.info(
        "%s: finishing the units in flight and ending their permits",
        signal.Signals(received).name,
    )
    stopping.set()
    supervisor.close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
