"""A race under load against the goals of a plan per load: the counts, the choice, the target
alone and "off from N", each computed by hand on a race built for it."""

from __future__ import annotations

from polyplan.formats.race import CONTROL, TARGET_ONLY, LoadLevel, LoadRace, LoadRow
from polyplan.validation.load_goals import goals_lines, level_goals, race_goals

DEFAULT = "llama.cpp default (--spec-default)"


def _row(label, clients, speedup, sd=0.0, predicted=None, interval=None, chosen=False):
    return LoadRow(label, clients, 10.0 * speedup, 0.0, 10.0, 0.0, 0.5, 0.0, speedup, sd, repeats=2, requests=8, decoded=512,
                   predicted_speedup=predicted, predicted_interval=interval, chosen=chosen)


def _race(chosen_at_4: str = "a") -> LoadRace:
    rows = (
        # 1 client: a is predicted +7.1 % and inside; b +20 % and outside (its interval [0.952, 1.048] with the control's 0.02
        # falls short of 1.10); a the fastest and chosen
        _row(TARGET_ONLY, 1, 1.0, predicted=1.0), _row(CONTROL, 1, 1.02, 0.01, predicted=1.0),
        _row("a", 1, 1.40, 0.03, 1.50, (1.3, 1.7), chosen=True), _row("b", 1, 1.0, 0.02, 1.20, (1.10, 1.25)),
        _row(DEFAULT, 1, 1.10, 0.02),
        # 2 clients: off chosen; a at 1.02 +- 0.02 is tied with the target alone (its interval's low 0.992 is under 1.0)
        _row(TARGET_ONLY, 2, 1.0, predicted=1.0, chosen=True), _row(CONTROL, 2, 0.99, 0.01, predicted=1.0),
        _row("a", 2, 1.02, 0.02, 0.95, (0.80, 1.10)), _row("b", 2, 0.90, 0.02, 0.92, (0.85, 1.00)),
        # 4 clients: a chosen again, 0.80 +- 0.01 against the target alone, beyond the control's 0.01
        _row(TARGET_ONLY, 4, 1.0, predicted=1.0, chosen=chosen_at_4 == TARGET_ONLY), _row(CONTROL, 4, 1.01, 0.01, predicted=1.0),
        _row("a", 4, 0.80, 0.01, 0.84, (0.70, 0.95), chosen=chosen_at_4 == "a"),
    )
    levels = (LoadLevel(1, "a", "a", "fastest", 3.0, DEFAULT), LoadLevel(2, "a", TARGET_ONLY, "tied", 2.0),
              LoadLevel(4, TARGET_ONLY, chosen_at_4, "slower" if chosen_at_4 == "a" else "fastest", 1.2))
    return LoadRace("llama.cpp", (1, 2, 4), rows, levels, 8, 64, 2, 2, 512)


def test_each_level_counts_its_predictions_and_judges_the_choice_by_hand():
    race = _race()
    one, two, four = race_goals(race).levels
    assert (one.predicted, one.within, one.judged) == (2, 1, 1)  # the target alone and the control are not predictions
    assert one.worst[0] == "b" and abs(one.worst[1] - 0.20) < 1e-12
    assert one.choice == "fastest" and one.below_target is False and not one.off and not one.target_tied
    assert one.limit == 3.0 and one.spec_default == 1.10
    assert (two.predicted, two.within, two.judged) == (2, 2, 2)
    assert two.off and two.target_tied and not two.target_fastest and two.below_target is False and two.spec_default is None
    assert four.below_target is True and not four.off and four.target_fastest and four.target_tied


def test_off_from_n_is_where_it_holds_at_every_larger_n_and_a_tie_agrees_with_either():
    goals = race_goals(_race())
    assert goals.off_from_predicted is None  # chosen again at 4: on throughout, whatever 2 said
    assert goals.off_from_measured == 4  # at 2 the target alone was tied with the fastest, not the fastest
    assert not goals.off_agrees  # on at 4, where the choice measured below the target alone
    agreed = race_goals(_race(chosen_at_4=TARGET_ONLY))
    assert agreed.off_from_predicted == 2 and agreed.off_from_measured == 4
    assert agreed.off_agrees  # off at 2 was a tie: it agrees with either
    assert agreed.levels[2].below_target is False  # the target alone is never below itself


def test_the_controls_offset_widens_the_tie_with_the_target_alone():
    rows = (_row(TARGET_ONLY, 2, 1.0, predicted=1.0), _row(CONTROL, 2, 1.0, predicted=1.0),
            _row("a", 2, 0.95, 0.01, 0.97, (0.9, 1.0), chosen=True))
    level = LoadLevel(2, TARGET_ONLY, "a", "slower", None)
    assert level_goals(level, rows).below_target is True  # 0.95 + 0.014 < 1.0
    wider = rows[:1] + (_row(CONTROL, 2, 1.05, predicted=1.0),) + rows[2:]
    assert level_goals(level, wider).below_target is False  # the control's 0.05 reaches it


def test_the_table_says_each_goal_per_race_and_clients():
    text = "\n".join(goals_lines([("the code workload", _race())]))
    assert "| the code workload | 1 | 1/2 | 1/2 | b (+20.0%) | a: fastest | no | on throughout / off from 4; no | 3.00x | 1.10x |" in text
    assert "| the code workload | 2 | 2/2 | 2/2 | a (-6.9%) | off: tied | no | on throughout / off from 4; no | 2.00x | not raced |" in text
    assert "| the code workload | 4 | 1/1 | 1/1 | a (+5.0%) | a: slower | yes |" in text
