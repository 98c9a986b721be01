"""``bless bench overhead``: the numbers it prints and how long a replay it times them in."""

from bless.cli import main


def test_overhead_times_the_policy_step_in_a_replay_of_the_length_asked(capsys):
    assert main(["bench", "overhead", "--squads", "20", "--replay", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "in a 0.05 s replay" in out and "deadline" in out and "us/kernel" in out


def test_overhead_refuses_a_replay_of_no_time(capsys):
    assert main(["bench", "overhead", "--replay", "0"]) == 2
    assert "--replay must be a positive number of simulated seconds" in capsys.readouterr().err
