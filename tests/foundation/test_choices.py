"""Choices declared with `text_choices`: the members, values and labels a class statement would give."""

from __future__ import annotations

import pickle

from django.db import models

from apps.moves.choices import MoveState
from apps.tracing.models import IndexRun
from apps.transactions.models import Redrive
from control_plane.choices import RunState, text_choices

Level = text_choices("Level", "in_flight", ("dead_lettered", "Dead-lettered"))


def test_members_are_named_by_value_and_labelled_in_words_unless_given():
    assert issubclass(Level, models.TextChoices)
    assert [(m.name, m.value, m.label) for m in Level] == [
        ("IN_FLIGHT", "in_flight", "In flight"), ("DEAD_LETTERED", "dead_lettered", "Dead-lettered")]
    assert Level.choices == [("in_flight", "In flight"), ("dead_lettered", "Dead-lettered")]
    assert Level.IN_FLIGHT == "in_flight" and str(Level.IN_FLIGHT) == "in_flight" and "in_flight" in Level
    assert Level("dead_lettered") is Level.DEAD_LETTERED


def test_a_set_belongs_to_the_module_that_declares_it():
    assert Level.__module__ == __name__ and Level.__qualname__ == "Level"
    assert MoveState.__module__ == "apps.moves.choices"
    assert pickle.loads(pickle.dumps(MoveState.FAILED)) is MoveState.FAILED
    assert MoveState.FAILED.label == "Failed (resume it or roll it back)"


def test_background_runs_share_one_state_set():
    expected = [("queued", "Queued"), ("running", "Running"), ("succeeded", "Succeeded"), ("failed", "Failed")]
    assert RunState.choices == expected
    assert IndexRun._meta.get_field("state").choices == expected
    assert Redrive._meta.get_field("state").choices == expected
