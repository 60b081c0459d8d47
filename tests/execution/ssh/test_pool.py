"""The job's pool of ssh host agents kept between attempts (``launcher/execution/ssh/pool.py``),
with stand-in agents and connections: an attempt takes only the agents that still serve, the
others are ended; what is kept is pinged between attempts; the spare hosts' agents opened in the
background are waited for; the job's end ends everything kept."""

from __future__ import annotations

import threading
import time
from typing import List

from launcher.execution.ssh.pool import AgentPool


class Conn:
    def __init__(self) -> None:
        self.closed = False

    def active(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True

    def send_eof(self, chan: object) -> None:  # not reached: the stand-in agents have no channel
        raise AssertionError("no channel")


class Agent:
    def __init__(self, conn: Conn, serves: bool = True, state: str = "ready") -> None:
        self.conn, self._serves, self.state = conn, serves, state
        self.chan = None
        self.lost = False
        self.pings: List[float] = []
        self.ready = threading.Event()

    def serves(self) -> bool:
        return self._serves and self.state == "ready"

    def check(self, now: float) -> None:
        pass

    def ping(self) -> None:
        self.pings.append(time.monotonic())

    def wait_ready(self) -> bool:
        self.ready.wait(10)
        return self.state == "ready"


def kept(**agents: Agent):
    return {name: (a.conn, a) for name, a in agents.items()}


def test_an_attempt_takes_the_agents_that_still_serve_and_the_others_are_ended():
    pool = AgentPool()
    good, busy, lost = Agent(Conn()), Agent(Conn(), serves=False), Agent(Conn())
    lost.conn.close()
    spare = Agent(Conn())
    pool.put(kept(h1=good, h2=busy, h3=lost, h4=spare))
    got = pool.take(["h1", "h2", "h3", "h5"])
    assert list(got) == ["h1"] and got["h1"][1] is good and pool.reused == 1
    assert busy.conn.closed and lost.conn.closed and not good.conn.closed
    # h4 was not asked for: still kept (and pinged) for a later attempt
    deadline = time.monotonic() + 10
    while len(spare.pings) < 2:
        assert time.monotonic() < deadline, "a kept agent is not pinged between attempts"
        time.sleep(0.05)
    assert pool.take(["h4"])["h4"][1] is spare
    assert pool.take(["h4"]) == {}  # taken once
    pool.close()
    assert not good.conn.closed  # an agent an attempt took is the attempt's to end


def test_the_jobs_end_ends_what_is_kept_and_a_replaced_agent_is_ended_at_once():
    pool = AgentPool()
    first, second = Agent(Conn()), Agent(Conn())
    pool.put(kept(h1=first))
    pool.put(kept(h1=second))
    assert first.conn.closed and not second.conn.closed
    pool.close()
    assert second.conn.closed


def test_the_spare_hosts_open_once_in_the_background_and_an_attempt_waits_for_them():
    pool = AgentPool()
    opened = threading.Event()
    calls = []
    spare = Agent(Conn(), state="starting")

    def open_hosts():
        calls.append(1)
        opened.wait(10)
        return kept(h3=spare)

    pool.standby(open_hosts)
    pool.standby(open_hosts)  # once per job
    taker = threading.Thread(target=lambda: got.update(pool.take(["h3"])))
    got: dict = {}
    taker.start()
    time.sleep(0.2)
    assert taker.is_alive()  # waits for the spare hosts' start
    opened.set()
    time.sleep(0.2)
    assert taker.is_alive()  # and for the agent's "ready"
    spare.state = "ready"
    spare.ready.set()
    taker.join(10)
    assert got["h3"][1] is spare and calls == [1]
    pool.close()


def test_a_spare_that_cannot_be_reached_leaves_nothing_kept():
    pool = AgentPool()

    def fails():
        raise OSError("no route to host")

    pool.standby(fails)
    assert pool.take(["h3"]) == {}
    pool.close()


class Chan:
    """A channel whose agent never answers EOF (its host's link is cut): no exit status comes."""

    closed = False

    def exit_status_ready(self) -> bool:
        return False


def test_an_agent_of_a_lost_host_is_not_waited_for_though_its_connection_looks_open():
    from launcher.execution.ssh.pool import end_agents

    class Eofs(Conn):
        def __init__(self) -> None:
            super().__init__()
            self.eofs = 0

        def send_eof(self, chan: object) -> None:
            self.eofs += 1

    cut, alive = Agent(Eofs()), Agent(Eofs())
    cut.chan = alive.chan = Chan()
    cut.lost, alive.lost = True, False  # a cut link: the agent went silent, TCP still "active" here
    end_agents([cut], [cut.conn], timeout=5.0)  # returns at once: nothing is asked of a lost host
    assert cut.conn.eofs == 0 and cut.conn.closed
    # a live agent is asked to end and waited for (here until the timeout: it never exits)
    end_agents([alive], [alive.conn], timeout=0.2)
    assert alive.conn.eofs == 1 and alive.conn.closed
