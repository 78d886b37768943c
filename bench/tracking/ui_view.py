"""What bench opens in the MLflow UI: the saved views its links open and the links it prints.

A run's link opens one of MLflow's shared views (an experiment tag, MLflow's own mechanism behind
its "Share" button; the UI reads it when the link says ?viewStateShareKey=<key> and no other view
parameter): the columns, the order, a sweep's filter and the charts of its chart mode. A sweep
also prints a link to MLflow's compare-runs page of its jobs. The view state's fields and the
routes are MLflow's UI's (read in 3.17's and 2.16's JS: mlflow/server/js/build); 2.16 ignores
the fields it does not know (columnOrder, columnWidths) and keeps the rest.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence
from urllib.parse import quote

from bench.report_view import DISPLAY
from bench.secrets import redact

if TYPE_CHECKING:
    from bench.report_view import Sample

log = logging.getLogger(__name__)

VIEW_TAG = "mlflow.sharedViewState."
# MLflow 3.x's UI ignores mlflow.experimentKind: it opens an experiment on the GenAI overview
# ("Traces 0") unless the link says workflowType=machine_learning (or the browser saved that
# choice, made with the sidebar's "Model training" switch, in localStorage mlflow.workflowType)
WORKFLOW = "workflowType=machine_learning"
# a run and its children carry the parent's id in this tag (the parent its own): a filter on it lists
# the parent too (mlflow.parentRunId would leave it out), the sweep by its name above its jobs
FAMILY_TAG = "bench.parent"
# the sweep's name on it and on each of its jobs: the view groups the runs table by it, the jobs under
# the sweep's name (MLflow nests children under their parent only when sorted by start time, collapsed:
# a shared view keeps no runsExpanded, and then its charts draw the parent alone)
GROUP_TAG = "bench.sweep"
NAME_COLUMN = "attributes.`Run Name`"  # the UI's id of the run name column
RUN_NAME_ORDER = "tags.`mlflow.runName`"  # the UI's "Sort: Run Name"
SECTION = "bench-sweep"  # the chart mode's first section: the sweep's figure per job
# The UI's own defaults of what a view does not set. MLflow 2.x replaces its state with the view's fields
# where 3.x merges them into its defaults, and a field it then lacks (runsPinned) crashes the page
# ("Something went wrong", MLflow 2.16): every view carries them all
UI_DEFAULTS: Dict[str, Any] = {
    "runsExpanded": {},
    "runsPinned": [],
    "runsHidden": [],
    "runsHiddenMode": "FIRST_10_RUNS",
    "viewMaximized": False,
    "runListHidden": False,
    "isAccordionReordered": False,
    "useGroupedValuesInCharts": True,
    "hideEmptyCharts": True,
    "groupBy": None,
    "groupsExpanded": {},
    "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""},
}


def runs_link(
    client: Any,
    uri: str,
    experiment_id: str,
    parent_run_id: Optional[str] = None,
    params: Sequence[str] = (),
    sample: Optional[Sample] = None,
) -> str:
    """The `MLflow UI:` line of a run's experiment, or of a sweep (`parent_run_id`): the command that
    serves a local store and the link to the experiment's runs table (workflowType: not the GenAI
    overview), opening the view share_view saved with the headline figure (`sample`'s, else images/s);
    when none could be saved, best first by the link's own parameters (a sweep's: the parent and its
    children)."""
    figure = sample.figure if sample else "images_per_second"
    try:
        key = share_view(client, experiment_id, figure, params, parent_run_id, bool(sample and sample.lower_is_better))
        query = f"{WORKFLOW}&viewStateShareKey={quote(key)}"
    except Exception as exc:  # the link without the saved columns is still a link
        log.debug("no shared MLflow view (%s: %s)", type(exc).__name__, exc)
        query = f"{WORKFLOW}&orderByKey={quote(f'metrics.`{figure}`')}&orderByAsc=false"
        if parent_run_id:
            query += "&searchFilter=" + quote(f"tags.`{FAMILY_TAG}` = '{parent_run_id}'")
    return _page("MLflow UI", uri, f"#/experiments/{experiment_id}/runs?{query}")


def jobs_compare_link(
    client: Any, uri: str, experiment_id: str, parent_run_id: str, sample: Optional[Sample]
) -> Optional[str]:
    """The `MLflow compare:` line of a sweep's jobs, best first by `sample`'s figure; None when it
    has none or the store does not answer (the runs table's link is printed all the same)."""
    figure = sample.figure if sample else "images_per_second"
    try:
        jobs = client.search_runs(
            [experiment_id],
            f"tags.mlflow.parentRunId = '{parent_run_id}'",
            order_by=[f"metrics.`{figure}` {'ASC' if sample and sample.lower_is_better else 'DESC'}"],
        )
    except Exception as exc:
        log.debug("no MLflow compare link (%s: %s)", type(exc).__name__, exc)
        return None
    return compare_link(uri, experiment_id, [job.info.run_id for job in jobs]) if jobs else None


def share_view(
    client: Any, experiment_id: str, figure: str, params: Sequence[str], parent_run_id: Optional[str], lower: bool
) -> str:
    """A saved view of the experiment's runs: `figure` (rounded), the failure reason and the swept
    `params` as columns, best first (`lower`: a latency; by name when no run has the figure); a
    parent's: the parent and its children grouped under the parent's name (the group's row: the best
    job's figure), in chart mode first a bar per job of `figure` (not the group's aggregate) and the
    swept keys against it; its share key."""
    has_figure = True
    if parent_run_id:
        client.set_tag(parent_run_id, FAMILY_TAG, parent_run_id)  # the parent is listed with its children
        family = client.search_runs([experiment_id], f"tags.`{FAMILY_TAG}` = '{parent_run_id}'")
        sweep_name = client.get_run(parent_run_id).info.run_name  # final: the sweep names its failures first
        for run in family:
            client.set_tag(run.info.run_id, GROUP_TAG, sweep_name)
        has_figure = any(figure in run.data.metrics for run in family)
    columns = [f"metrics.`{DISPLAY.get(figure, figure)}`", "tags.`error`", *(f"params.`{name}`" for name in params)]
    state: Dict[str, Any] = {
        **UI_DEFAULTS,
        "selectedColumns": columns,
        # the figure and the reason first, by the name (the UI groups columns by kind: the error tag
        # would come after every param, off the page), the name and the reason wide enough to read
        "columnOrder": [NAME_COLUMN, *columns],
        "columnWidths": {NAME_COLUMN: 330, "tags.`error`": 400},
        # not by start time: the UI then nests the jobs under their parent, collapsed (3.x keeps no
        # runsExpanded from a view), and the jobs' reasons are out of sight
        "orderByKey": f"metrics.`{figure}`" if has_figure else RUN_NAME_ORDER,
        "orderByAsc": lower or not has_figure,
    }
    if parent_run_id:
        state["searchFilter"] = f"tags.`{FAMILY_TAG}` = '{parent_run_id}'"
        by_sweep = [{"mode": "tag", "groupByData": GROUP_TAG}]
        state["groupBy"] = {"aggregateFunction": "min" if lower else "max", "groupByKeys": by_sweep}
        state.update(_job_charts(parent_run_id, figure, params))
    key = f"bench-sweep-{parent_run_id[:12]}" if parent_run_id else "bench-runs"
    client.set_experiment_tag(experiment_id, VIEW_TAG + key, json.dumps(state))
    return key


def _job_charts(parent_run_id: str, figure: str, params: Sequence[str]) -> Dict[str, Any]:
    """Chart mode: a section of its own, first, with a bar per job of `figure` and (when the sweep
    varied a key) a parallel-coordinates chart of the swept keys against it; the UI adds its chart
    per metric in the sections after it. Every job charted (the UI's default: the first 10 runs);
    the parent, which has no figure, not: 3.x leaves it out itself, 2.x would draw an empty bar and
    reads runsHidden (3.x keeps no runsHidden from a view: there the CUSTOM mode hides nothing)."""
    common = {"metricSectionId": SECTION, "deleted": False, "isGenerated": False}
    figure = DISPLAY.get(figure, figure)  # its rounded copy: the bars agree with the report's table to the digit
    charts: List[Dict[str, Any]] = [
        {"uuid": f"{SECTION}-figure", "type": "BAR", "metricKey": figure, "displayName": figure, **common}
    ]
    if params:
        charts.append(
            {
                "uuid": f"{SECTION}-swept",
                "type": "PARALLEL",
                "selectedParams": list(params),
                "selectedMetrics": [figure],
                "showAllRuns": False,
                **common,
            }
        )
    section = {"uuid": SECTION, "name": f"the sweep's jobs: {figure}", "display": True, "isReordered": True}
    return {
        "useGroupedValuesInCharts": False,  # a bar per job, not one for the group
        "runsHiddenMode": "CUSTOM",
        "runsHidden": [parent_run_id],
        "compareRunCharts": charts,
        "compareRunSections": [{**section, "deleted": False, "isGenerated": False}],
        "isAccordionReordered": True,  # the sections in this order (else sorted by name, this one among them)
    }


def compare_link(uri: str, experiment_id: str, run_ids: Sequence[str]) -> str:
    """MLflow's compare-runs page of `run_ids` (a sweep's jobs): a parallel-coordinates plot of the
    params they differ in against a metric, and their params and metrics side by side. The route's
    query is JSON lists (the UI's getCompareRunPageRoute), percent-encoded for terminals."""

    def listed(values: Sequence[str]) -> str:
        return quote(json.dumps(list(values), separators=(",", ":")))

    return _page("MLflow compare", uri, f"#/compare-runs?runs={listed(run_ids)}&experiments={listed([experiment_id])}")


def _page(what: str, uri: str, path: str) -> str:
    """`what: <the server's URL>/<path>`, or for a local store the `mlflow ui` command to serve it first."""
    if uri.startswith(("http://", "https://")):
        return f"{what}: {redact(uri).rstrip('/')}/{path}"
    return f"{what}: mlflow ui --backend-store-uri {uri}, then open http://127.0.0.1:5000/{path}"
