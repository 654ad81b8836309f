"""Drives a running `leasehold agent` as a worker would and checks what it answers, with the
client installed from this directory (`pip install ./clients/python`, into a virtual
environment):

    .venv/bin/python clients/python/check_agent.py http://127.0.0.1:PORT TOKEN

Exit 0 when every check held; the first failure is printed with what was seen.
"""

import sys
import time

from leasehold_agent import Agent, AgentError, NotOwner


def main(url, token):
    agent = Agent(url, token=token)
    deadline = time.monotonic() + 30
    while not agent.leases():
        assert time.monotonic() < deadline, "the agent took no lease within 30 s"
        time.sleep(0.1)
    held = agent.leases()
    partition = held[0]["partition"]
    lease = agent.lease(partition)
    assert lease["epoch"] >= 1 and lease["ms_left"] > 0, lease

    events = agent.events(last_event_id=0, timeout=10)
    first = next(events)
    assert first["kind"] == "acquired", first

    with agent.permit(partition) as permit:
        assert permit.valid() and permit.epoch == lease["epoch"], vars(permit)
        assert permit.deadline <= time.monotonic() + lease["ms_left"] / 1000.0 + 1.0
    try:
        agent._call("DELETE", f"/v1/permits/{permit.id}")
        raise AssertionError("an ended permit was ended again")
    except AgentError as error:
        assert error.status == 404, error

    left = agent.permit(partition, ttl_ms=60000)
    listed = agent.permits()
    assert [p["id"] for p in listed] == [left.id], listed
    assert 0 < listed[0]["ttl_ms_left"] <= 60000, listed
    agent.end_permit(left.id)
    assert agent.permits() == [], agent.permits()

    reported = agent.report_load(partition, 2.5)
    assert reported["load"] == 2.5, reported

    route = agent.route("order-42")
    assert 0 <= route["partition"] < len(agent.map()), route

    unauthorized = Agent(url, token="wrong")
    try:
        unauthorized.permit(partition)
        raise AssertionError("a permit was granted without the token")
    except AgentError as error:
        assert error.status == 401, error

    # A release stops new work at once; the events say so, then that it was written.
    agent.release(partition)
    try:
        agent.lease(partition)
        raise AssertionError("a released partition still answered for a lease")
    except NotOwner as refusal:
        assert refusal.status == 409, refusal
    # What the latest tenure of the partition went through: on a loaded machine an earlier
    # one may have been lost to a late renewal and the partition taken again.
    kinds = []
    for event in events:
        if event["partition"] != partition:
            continue
        if event["kind"] == "acquired":
            kinds = []
        else:
            kinds.append(event["kind"])
        if "released" in kinds:
            break
    assert kinds == ["releasing", "released"], kinds
    print("check_agent: every check held")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
