"""What the commands share (tevviz/commands/common.py): Ctrl-C asks first and stops at once the second time, and a
loop ends after the item in hand."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tevviz import commands


def test_interrupt_asks_first_and_stops_at_once_second():
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN under a shell's background job, else Python's own
    with commands.Interrupt("round") as stop:
        assert not stop()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert stop()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)  # a third, close behind: the stop is under way, nothing more is raised
        time.sleep(0.05)
    # stopped: Ctrl-C stays ignored while the command writes what it finished, until it returns (cli.main)
    assert signal.getsignal(signal.SIGINT) is not before
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)
    commands.common.restore_interrupts()
    assert signal.getsignal(signal.SIGINT) is before


def test_until_stopped_ends_a_loop_after_the_item_in_hand():
    flag = []
    given = commands.UntilStopped([1, 2, 3, 4], lambda: bool(flag))
    seen = []
    for x in given:
        seen.append(x)
        if x == 2:
            flag.append(1)
    assert seen == [1, 2] and given.done == 2 and len(given) == 4
