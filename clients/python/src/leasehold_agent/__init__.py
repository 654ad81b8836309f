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

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request

# Optional[X] rather than `X | None`: `typing.get_type_hints` evaluates annotations, and
# Python 3.9 cannot evaluate `X | None`.
from typing import Any, Iterator, Literal, Mapping, Optional, TypedDict, cast

__all__ = [
    "Agent",
    "AgentError",
    "Draining",
    "EventStream",
    "Lease",
    "LeaseEvent",
    "LoadReport",
    "MapEntry",
    "NotOwner",
    "Permit",
    "PermitRecord",
    "Releasing",
    "Route",
]


class Lease(TypedDict):
    """A lease this node holds: `ms_left` counts from when the agent answered."""

    partition: int
    epoch: int
    ms_left: int


class _PermitFields(TypedDict):
    id: int
    partition: int
    epoch: int
    ms_left: int


class PermitRecord(_PermitFields, total=False):
    """A permit as the agent describes it; `ttl_ms_left` only for one with a time-to-live."""

    ttl_ms_left: int


class LeaseEvent(TypedDict):
    """One lease change of this node, from the event stream."""

    id: int
    kind: Literal["acquired", "releasing", "released", "lost"]
    partition: int
    epoch: int


class Releasing(TypedDict):
    partition: int
    releasing: bool


class Draining(TypedDict):
    node: str
    draining: bool


class LoadReport(TypedDict):
    partition: int
    load: float


class Route(TypedDict):
    """Where `key` goes: `owner` and `address` are None while unknown, and `epoch` unless
    this node holds the partition."""

    key: str
    partition: int
    owner: Optional[str]
    address: Optional[str]
    epoch: Optional[int]


class MapEntry(TypedDict):
    partition: int
    owner: Optional[str]
    address: Optional[str]


class AgentError(Exception):
    """The agent refused a request: `status` and the `error` it gave."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body
        super().__init__(f"{status}: {body.get('error', body)}")


class NotOwner(AgentError):
    """This node does not serve the partition; `owner` and `address` say who does, if known."""

    @property
    def owner(self) -> Optional[str]:
        return cast(Optional[str], self.body.get("owner"))

    @property
    def address(self) -> Optional[str]:
        return cast(Optional[str], self.body.get("address"))


class Permit:
    """One unit of work's hold on a partition: the hand-off of the partition waits until it
    is ended, the lease ends, or `valid()` turns false (its deadline, on this clock)."""

    def __init__(self, agent: Agent, body: PermitRecord, sent_at: float) -> None:
        self.agent = agent
        self.id = body["id"]
        self.partition = body["partition"]
        self.epoch = body["epoch"]
        self.deadline = sent_at + body["ms_left"] / 1000.0
        self.ended = False

    def valid(self) -> bool:
        return not self.ended and time.monotonic() < self.deadline

    def remaining(self) -> float:
        """Seconds left before the deadline on this clock; zero once ended or past it."""
        if self.ended:
            return 0.0
        return max(0.0, self.deadline - time.monotonic())

    def end(self) -> None:
        if self.ended:
            return
        self.ended = True
        try:
            self.agent._call("DELETE", f"/v1/permits/{self.id}")
        except AgentError as error:
            # Already gone with its lease: nothing left to end.
            if error.status != 404:
                raise

    def __enter__(self) -> Permit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()


class Agent:
    """The agent at `base_url` (`http://127.0.0.1:7464`), with its bearer token if it has one."""

    def __init__(self, base_url: str, token: Optional[str] = None, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _request(
        self, method: str, path: str, headers: Optional[Mapping[str, str]] = None
    ) -> urllib.request.Request:
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

    def _call(self, method: str, path: str, body: Optional[Mapping[str, object]] = None) -> Any:
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

    def leases(self) -> list[Lease]:
        """The leases this node holds: partition, epoch, ms_left."""
        return cast(list[Lease], self._call("GET", "/v1/leases")["leases"])

    def lease(self, partition: int) -> Lease:
        """The lease on `partition` if this node holds it; raises NotOwner otherwise."""
        return cast(Lease, self._call("GET", f"/v1/leases/{int(partition)}"))

    def permit(self, partition: int, ttl_ms: Optional[int] = None) -> Permit:
        """A work permit on `partition`; raises NotOwner if this node does not serve it.
        With `ttl_ms`, the agent ends the permit by itself after that long if this worker
        has not (it crashed, say), so that a hand-off does not wait the drain timeout."""
        sent_at = time.monotonic()
        path = f"/v1/leases/{int(partition)}/permits"
        if ttl_ms is not None:
            path += f"?ttl_ms={int(ttl_ms)}"
        body: PermitRecord = self._call("POST", path)
        return Permit(self, body, sent_at)

    def permits(self) -> list[PermitRecord]:
        """The permits outstanding on this agent (id, partition, epoch, ms_left and, with a
        time-to-live, ttl_ms_left): what a worker restarted after a crash may have left."""
        return cast(list[PermitRecord], self._call("GET", "/v1/permits")["permits"])

    def end_permit(self, permit_id: int) -> None:
        """Ends the permit `permit_id` (one listed by `permits`)."""
        self._call("DELETE", f"/v1/permits/{int(permit_id)}")

    def release(self, partition: int) -> Releasing:
        """Gives `partition` up: no new permit from now on, and the lease is released once
        the permits outstanding on it end."""
        return cast(Releasing, self._call("POST", f"/v1/leases/{int(partition)}/release"))

    def report_load(self, partition: int, load: float) -> LoadReport:
        """Reports the partition's load (a number from 0 to 1e12, one unit across the group):
        published with the next renewal, so that the group balances by load."""
        path = f"/v1/leases/{int(partition)}/load"
        return cast(LoadReport, self._call("PUT", path, {"load": float(load)}))

    def drain(self) -> Draining:
        """Hands every partition off and takes none until `undrain`."""
        return cast(Draining, self._call("POST", "/v1/drain"))

    def undrain(self) -> Draining:
        return cast(Draining, self._call("POST", "/v1/undrain"))

    def route(self, key: str) -> Route:
        """The partition `key` falls in, and who serves it."""
        query = urllib.parse.urlencode({"key": key})
        return cast(Route, self._call("GET", "/v1/route?" + query))

    def map(self) -> list[MapEntry]:
        """Every partition with its owner and the owner's address, as this node knows them."""
        return cast(list[MapEntry], self._call("GET", "/v1/map")["partitions"])

    def open_events(
        self, last_event_id: Optional[int] = None, timeout: Optional[float] = None
    ) -> EventStream:
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

    def events(
        self, last_event_id: Optional[int] = None, timeout: Optional[float] = None
    ) -> Iterator[LeaseEvent]:
        """Lease events as dicts (id, kind, partition, epoch), from after `last_event_id` if
        given. Ends when the agent closes the stream; reconnect with the last id seen."""
        with self.open_events(last_event_id, timeout) as stream:
            yield from stream


class EventStream:
    """An open `/v1/events` stream: iterating it yields each lease event as a dict, and
    raises AgentError if the agent cuts the reader off (too slow to keep up)."""

    def __init__(self, reply: http.client.HTTPResponse) -> None:
        self._reply = reply

    def __iter__(self) -> Iterator[LeaseEvent]:
        name = "message"
        data: list[str] = []
        for raw in self._reply:
            line = raw.decode().rstrip("\r\n")
            if not line:
                if data:
                    event = json.loads("\n".join(data))
                    if name == "error":
                        raise AgentError(503, _error_body(event))
                    yield cast(LeaseEvent, event)
                name, data = "message", []
            elif line.startswith(":"):
                continue
            elif line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())

    def close(self) -> None:
        self._reply.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error_body(value: object) -> dict[str, Any]:
    """`value` as an AgentError's body: a reply from something in between (a proxy) need not
    be a JSON object."""
    if isinstance(value, dict):
        return cast(dict[str, Any], value)
    return {"error": value}


def _refusal(error: urllib.error.HTTPError) -> AgentError:
    """The AgentError (NotOwner for a 409) for an HTTP error reply."""
    text = error.read().decode()
    try:
        body = _error_body(json.loads(text))
    except ValueError:
        body = {"error": text}
    if error.code == 409:
        return NotOwner(error.code, body)
    return AgentError(error.code, body)
