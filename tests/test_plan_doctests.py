"""The planner's docstring examples run and print what they say (a stale example, 23 % and 4.35 s after the
flash share became 17 %, goes unnoticed where nothing runs them).

Every module of the course's planner (ddp_lab/course/plan) and of the lab's (ddp_lab/plan) is run through doctest;
a module with examples fails here when one of them prints something else.
"""

import doctest
import importlib
import pkgutil

import pytest

import ddp_lab.course.plan
import ddp_lab.plan

MODULES = [f"{package.__name__}.{info.name}" for package in (ddp_lab.course.plan, ddp_lab.plan)
           for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_")]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_print_what_they_say(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, report=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples print something else"


def test_the_examples_are_found():
    """The planner's modules hold examples (about 150): a doctest run that found none would pass unseen."""
    finder = doctest.DocTestFinder()
    found = sum(len(test.examples) for name in MODULES for test in finder.find(importlib.import_module(name)))
    assert found > 100 and "ddp_lab.course.plan.efficiency" in MODULES and "ddp_lab.plan.published" in MODULES
