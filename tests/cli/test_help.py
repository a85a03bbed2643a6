"""The ``--help`` of ``vgpu-guard``, ``review`` and ``simulate``, exactly: exit codes 0/1/2, every
``-o`` choice described, the cluster options. A changed flag or wording shows up here as a diff users would see."""

from __future__ import annotations

import pytest

from vgpu_guard.cli.app import run

REVIEW_HELP = """\
usage: vgpu-guard review [-h] -f FILE [-R] [--max-bytes N] [--max-documents N]
                         [--cluster FILE | --kubeconfig PATH] [--context NAME] [--config FILE]
                         [--device-config FILE] [--as USERNAME] [-o {text,json,yaml,policyreport}]
                         [--exit-zero]

Run exactly the webhook's decision code on every object in the files.

options:
  -h, --help            show this help message and exit
  -f FILE, --filename FILE
                        objects to review: a file, a directory of .yaml/.yml/.json files, or - for
                        stdin (repeatable)
  -R, --recursive       read the directories given with -f recursively
  --max-bytes N         refuse an input file larger than N bytes (default: 16777216)
  --max-documents N     refuse an input file of more than N YAML documents (default: 10000)
  --cluster FILE        YAML of Nodes, Queues, PodGroups (HyperNodes...) describing the cluster to
                        judge against (default: each file's own Nodes, or the built-in example
                        cluster when it has none)
  --kubeconfig PATH     read the cluster to judge against from a live API server, read-only: its
                        Nodes, Queues, PodGroups and HyperNodes (nothing is written)
  --context NAME        the kubeconfig context to use (default: its current-context)
  --config FILE         vgpu-guard config file
  --device-config FILE  the plugin's device-config.yaml (or its ConfigMap)
  --as USERNAME         user the requests come from (default: kubernetes-admin)
  -o {text,json,yaml,policyreport}, --output {text,json,yaml,policyreport}
                        output format (default: text); each is described under 'output formats'
                        below
  --exit-zero           exit 0 when objects are denied (the output still says so): to publish a
                        report from CI

output formats (-o):
  text          a readable summary (the default)
  json          one result per object and rule (rule, path, action deny|warn|audit|mutate,
                message, fix), a summary and each object's verdict, patch and mutated object;
                schema: docs/review-report.schema.json
  yaml          the same document as json, in YAML
  policyreport  the results as wgpolicyk8s.io/v1alpha2 PolicyReports (YAML): one per namespace,
                a ClusterPolicyReport for cluster-scoped objects, as Kyverno reports them: a
                policy per rule family with category and severity, results only for judged
                objects, named after the input

exit codes:
  0  every object allowed (warnings, mutations and audit findings allowed too), or --exit-zero
  1  at least one object denied
  2  unusable input: unreadable or over-limit file, invalid YAML, bad --config or --cluster,
     or a --kubeconfig that cannot be read
"""

SIMULATE_HELP = """\
usage: vgpu-guard simulate [-h] [-f SCENARIO] [-R] [--max-bytes N] [--max-documents N]
                           [--config FILE] [--device-config FILE]
                           [--cluster FILE | --kubeconfig PATH] [--context NAME] [--routing]
                           [--volcano-version X.Y]
                           [--volcano-stale-cache | --no-volcano-stale-cache]
                           [-o {text,json,yaml,policyreport}] [-v]

Send every object of the scenario through the webhook's decision code, run a model of
Volcano (job controller and scheduler sessions, its writes arbitrated by the webhook's ledger
arbiter) and vgpu-guard's allocation controller against an in-memory API server until nothing
changes, and report where every pod landed, the per-GPU ledger and the queue guarantees. Without
-f: the built-in scenario. Volcano mode (Volcano schedules, the arbiter reserves every GPU
assignment) unless --routing or the configuration's scheduling.routing says otherwise.

options:
  -h, --help            show this help message and exit
  -f SCENARIO, --filename SCENARIO
                        YAML of Nodes, Queues, Pods, workloads...: a file, a directory of
                        .yaml/.yml/.json files, or - for stdin (repeatable)
  -R, --recursive       read the directories given with -f recursively
  --max-bytes N         refuse an input file larger than N bytes (default: 16777216)
  --max-documents N     refuse an input file of more than N YAML documents (default: 10000)
  --config FILE         vgpu-guard config file
  --device-config FILE  the plugin's device-config.yaml (or its ConfigMap)
  --cluster FILE        YAML of Nodes, Queues, PodGroups (HyperNodes...) describing the cluster to
                        judge against (default: the scenario's own Nodes, or the built-in example
                        cluster when it has none)
  --kubeconfig PATH     read the cluster to judge against from a live API server, read-only: its
                        Nodes, Queues, PodGroups and HyperNodes (nothing is written)
  --context NAME        the kubeconfig context to use (default: its current-context)
  --routing             routing mode: vgpu-guard's controller places vGPU pods (default: volcano
                        mode, unless --config sets scheduling.routing)
  --volcano-version X.Y
                        the Volcano release whose writes the model makes: 1.16 and later put the
                        assignment on the Binding, 1.10-1.15 PATCH it onto the pod, then bind
                        (default: 1.16)
  --volcano-stale-cache, --no-volcano-stale-cache
                        reproduce Volcano #3616: a session does not count its own placements, so
                        three 12 GiB pods land on one 24 GiB card (default: on for the built-in
                        scenario, off with -f)
  -o {text,json,yaml,policyreport}, --output {text,json,yaml,policyreport}
                        output format (default: text); each is described under 'output formats'
                        below
  -v, --verbose         text output: every admission's warnings, notes and created pods under its
                        row, every pod's reason under it (default: one line per object, warnings
                        and reasons grouped)

output formats (-o):
  text          a readable summary (the default)
  json          the mode, every admission request, every Volcano session (bound, refused
                and why), where every pod landed (node, devices) or why it waits, the GPU
                ledger, queues against capacity, and review's results and summary; schema:
                docs/simulate.schema.json
  yaml          the same document as json, in YAML
  policyreport  the results as wgpolicyk8s.io/v1alpha2 PolicyReports (YAML): one per namespace,
                a ClusterPolicyReport for cluster-scoped objects, as Kyverno reports them: a
                policy per rule family with category and severity, results only for judged
                objects, named after the input

exit codes:
  0  the simulation completed, whatever it found (denials and Pending pods are outcomes)
  1  not used: to fail a CI step on a denial, run vgpu-guard review on the same files
  2  unusable input: unreadable or over-limit file, invalid YAML, bad --config or --cluster,
     a --kubeconfig that cannot be read, a --volcano-version the model does not know, or a
     scenario the in-memory cluster cannot run
"""


TOP_HELP = """\
usage: vgpu-guard [-h] [--version] COMMAND ...

Admission webhook and policy controller for Volcano vGPU clusters.

positional arguments:
  COMMAND
    review    run the admission decisions on YAML files, offline
    simulate  run admission, a Volcano model and the controller on a scenario, in memory
    serve     run the webhook and/or the controller against a cluster
    certs     certificate tools for the webhook's TLS
    sandbox   a local cluster for kubectl: the real control plane, Kubernetes 1.20.2
    status    one screen on the fleet's GPUs: memory, cores, pods, MIG, pending pods, queues
    cleanup   delete the release's webhook configurations (the chart's pre-delete hook)
    label-ns  label namespaces with their name as 1.21+ does (the chart's hook on 1.20)

options:
  -h, --help  show this help message and exit
  --version   show program's version number and exit

exit codes (review's and simulate's --help say what each means for them):
  0  ok: every object allowed (review), the run completed (simulate, status, certs, serve, sandbox,
     cleanup, label-ns)
  1  denied: at least one object denied (review); certs, sandbox, cleanup and label-ns also use it
     when they refuse or a component, deletion or label fails (the reason is on stderr)
  2  unusable input or cluster: an unreadable, over-limit or invalid file or flag, or a
     kubeconfig or API server that cannot be read
"""


def test_top_level_help_is_exactly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exit_:
        run(["--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == TOP_HELP


@pytest.mark.parametrize(("command", "expected"), [("review", REVIEW_HELP), ("simulate", SIMULATE_HELP)])
def test_help_is_exactly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str, expected: str
) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to the terminal's width
    with pytest.raises(SystemExit) as exit_:
        run([command, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == expected


@pytest.mark.parametrize("command", ["review", "simulate"])
def test_every_output_choice_and_exit_code_is_described(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        run([command, "--help"])
    formats = capsys.readouterr().out.split("output formats (-o):\n", 1)[1].split("\n\n")[0]
    described = [line.split()[0] for line in formats.splitlines() if not line.startswith("    ")]
    assert described == ["text", "json", "yaml", "policyreport"]
