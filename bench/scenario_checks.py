"""For the type checker only: every built-in scenario, the MLflow tracker and the launchers satisfy
bench.scenarios' Protocols. mypy checks this module with the rest of bench/ (pyproject's
[tool.mypy]); nothing imports it at run time, and its imports are for mypy's eyes only."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.infer.scenario import InferScenario
    from bench.iobench.scenario import StorageScenario
    from bench.launch.launchers import Elastic, InProcess, Joined
    from bench.scenarios import Launcher, Scenario, Tracker
    from bench.tracking.tracker import Tracker as MlflowTracker
    from bench.train.scenario import TrainScenario

    scenarios: list[Scenario] = [TrainScenario(), InferScenario(), StorageScenario()]
    tracker: Tracker = MlflowTracker()
    launchers: list[type[Launcher]] = [InProcess, Elastic, Joined]
