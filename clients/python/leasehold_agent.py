"""A client for `leasehold agent`: leases, work permits and lease events over its HTTP API.

Standard library only. A permit's deadline is counted on this process's own monotonic clock
from the moment the request was *sent*, so a slow reply can only shorten it:

    agent = Agent("http://127.0.0.1:7464", token="...")
    for event in agent.events():
        if event["kind"] == "acquired":
            with agent.permit(event["partition"]) as permit:
                while permit.valid():
                    do_some_work(permit.partition, fencing_token=permit.epoch)
"""

import json
import time
import urllib.error
import urllib.parse
import urllib.request


class AgentError(Exception):
    """The agent refused a request: `status` and the `error` it gave."""

    def __init__(self, status, body):
        self.status = status
        self.body = body
        super().__init__(f"{status}: {body.get('error', body)}")


class NotOwner(AgentError):
    """This node does not serve the partition; `owner` and `address` say who does, if known."""

    @property
    def owner(self):
        return self.body.get("owner")

    @property
    def address(self):
        return self.body.get("address")


class Permit:
    """One unit of work's hold on a partition: the hand-off of the partition waits until it
    is ended, the lease ends, or `valid()` turns false (its deadline, on this clock)."""

    def __init__(self, agent, body, sent_at):
        self.agent = agent
        self.id = body["id"]
        self.partition = body["partition"]
        self.epoch = body["epoch"]
        self.deadline = sent_at + body["ms_left"] / 1000.0
        self.ended = False

    def valid(self):
        return not self.ended and time.monotonic() < self.deadline

    def remaining(self):
        """Seconds left before the deadline on this clock; zero once ended or past it."""
        if self.ended:
            return 0.0
        return max(0.0, self.deadline - time.monotonic())

    def end(self):
        if self.ended:
            return
        self.ended = True
        try:
            self.agent._call("DELETE", f"/v1/permits/{self.id}")
        except AgentError as error:
            # Already gone with its lease: nothing left to end.
            if error.status != 404:
                raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.end()


class Agent:
    """The agent at `base_url` (`http://127.0.0.1:7464`), with its bearer token if it has one."""

    def __init__(self, base_url, token=None, timeout=5.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _request(self, method, path, headers=None):
        request = urllib.request.Request(self.base_url + path, method=method)
        # No web page can send this header through a browser without the agent's consent,
        # which it never gives: the agent refuses changes that lack it (or a JSON body, or
        # a token).
        request.add_header("X-Leasehold-Request", "1")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        return request

    def _call(self, method, path, body=None):
        request = self._request(method, path)
        if body is not None:
            request.data = json.dumps(body).encode()
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                text = reply.read().decode()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            raise _refusal(error) from None

    def leases(self):
        """The leases this node holds: partition, epoch, ms_left."""
        return self._call("GET", "/v1/leases")["leases"]

    def lease(self, partition):
        """The lease on `partition` if this node holds it; raises NotOwner otherwise."""
        return self._call("GET", f"/v1/leases/{int(partition)}")

    def permit(self, partition, ttl_ms=None):
        """A work permit on `partition`; raises NotOwner if this node does not serve it.
        With `ttl_ms`, the agent ends the permit by itself after that long if this worker
        has not (it crashed, say), so that a hand-off does not wait the drain timeout."""
        sent_at = time.monotonic()
        path = f"/v1/leases/{int(partition)}/permits"
        if ttl_ms is not None:
            path += f"?ttl_ms={int(ttl_ms)}"
        body = self._call("POST", path)
        return Permit(self, body, sent_at)

    def permits(self):
        """The permits outstanding on this agent (id, partition, epoch, ms_left and, with a
        time-to-live, ttl_ms_left): what a worker restarted after a crash may have left."""
        return self._call("GET", "/v1/permits")["permits"]

    def end_permit(self, permit_id):
        """Ends the permit `permit_id` (one listed by `permits`)."""
        self._call("DELETE", f"/v1/permits/{int(permit_id)}")

    def release(self, partition):
        return self._call("POST", f"/v1/leases/{int(partition)}/release")

    def report_load(self, partition, load):
        """Reports the partition's load (a number from 0 to 1e12, one unit across the group):
        published with the next renewal, so that the group balances by load."""
        return self._call("PUT", f"/v1/leases/{int(partition)}/load", {"load": float(load)})

    def drain(self):
        return self._call("POST", "/v1/drain")

    def undrain(self):
        return self._call("POST", "/v1/undrain")

    def route(self, key):
        return self._call("GET", "/v1/route?" + urllib.parse.urlencode({"key": key}))

    def map(self):
        return self._call("GET", "/v1/map")["partitions"]

    def open_events(self, last_event_id=None, timeout=None):
        """The lease event stream, connected before this returns: every event after the call
        is in it, so a snapshot of `leases()` taken next misses nothing. Iterate it for dicts
        as `events` yields; `timeout` bounds each read (the agent sends a keep-alive every
        15 s). Close it, or use it in a `with` block. Raises AgentError if the agent refuses
        the stream: 410 when `last_event_id` is older than the events it keeps, 503 when too
        many streams are open.

        Event ids count from 1 in each agent process: after the agent restarts, an id from
        before names a different event. Follow from now and list `leases()` instead."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        request = self._request("GET", "/v1/events", headers)
        try:
            return EventStream(urllib.request.urlopen(request, timeout=timeout))
        except urllib.error.HTTPError as error:
            raise _refusal(error) from None

    def events(self, last_event_id=None, timeout=None):
        """Lease events as dicts (id, kind, partition, epoch), from after `last_event_id` if
        given. Ends when the agent closes the stream; reconnect with the last id seen."""
        with self.open_events(last_event_id, timeout) as stream:
            yield from stream


class EventStream:
    """An open `/v1/events` stream: iterating it yields each lease event as a dict, and
    raises AgentError if the agent cuts the reader off (too slow to keep up)."""

    def __init__(self, reply):
        self._reply = reply

    def __iter__(self):
        name, data = "message", []
        for raw in self._reply:
            line = raw.decode().rstrip("\r\n")
            if not line:
                if data:
                    event = json.loads("\n".join(data))
                    if name == "error":
                        raise AgentError(503, event)
                    yield event
                name, data = "message", []
            elif line.startswith(":"):
                continue
            elif line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())

    def close(self):
        self._reply.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _refusal(error):
    """The AgentError (NotOwner for a 409) for an HTTP error reply."""
    text = error.read().decode()
    try:
        body = json.loads(text)
    except ValueError:
        body = {"error": text}
    if error.code == 409:
        return NotOwner(error.code, body)
    return AgentError(error.code, body)
