"""For the type checker only: every built-in scenario (with its outcome and report types), its report
class, the MLflow tracker and the launchers satisfy bench.scenarios' Protocols. mypy checks this module
with the rest of bench/ (pyproject's [tool.mypy]); nothing imports it at run time, and its imports are
for mypy's eyes only."""

from __future__ import annotations

from typing import TYPE_CHECKING, List

if TYPE_CHECKING:
    from bench.infer.report import InferReport
    from bench.infer.result import InferOutcome
    from bench.infer.scenario import InferScenario
    from bench.iobench.report import StorageReport
    from bench.iobench.scenario import StorageScenario
    from bench.launch.launchers import Elastic, InProcess, Joined
    from bench.scenarios import AnyScenario, Launcher, Report, ReportClass, Scenario, Tracker
    from bench.tracking.tracker import Tracker as MlflowTracker
    from bench.train.report import TrainReport
    from bench.train.result import TrainOutcome
    from bench.train.scenario import TrainScenario

    train: Scenario[TrainOutcome, TrainReport] = TrainScenario()
    inference: Scenario[InferOutcome, InferReport] = InferScenario()
    storage: Scenario[StorageReport, StorageReport] = StorageScenario()
    scenarios: List[AnyScenario] = [train, inference, storage]
    report_classes: List[ReportClass[Report]] = [TrainReport, InferReport, StorageReport]
    tracker: Tracker = MlflowTracker()
    launchers: List[type[Launcher]] = [InProcess, Elastic, Joined]
