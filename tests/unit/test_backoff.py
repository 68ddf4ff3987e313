"""wait.Backoff: pauses that grow to a cap, and (later=) lighter once a wait lasts."""

from kfp_ray.wait import Backoff


def test_pauses_grow_to_the_cap_with_jitter():
    b = Backoff(0.2, 2.0, 1.0)
    pauses = [b.next() for _ in range(6)]
    assert 0.18 <= pauses[0] <= 0.22 and all(0.9 <= p <= 1.1 for p in pauses[3:])


def test_later_pauses_take_over_once_the_given_pauses_add_up():
    b = Backoff(1.0, 1.0, 1.0, later=(60.0, 5.0))
    pauses = [b.next() for _ in range(80)]
    switch = next(i for i, p in enumerate(pauses) if p > 2)
    assert 60 <= sum(pauses[:switch]) < 61.2  # every second for the first minute ...
    assert all(4.5 <= p <= 5.5 for p in pauses[switch:])  # ... then every 5 s
