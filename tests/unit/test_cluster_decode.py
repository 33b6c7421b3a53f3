"""decode.py (msgspec, straight from the bytes) against json.loads and parse.py: the same
slim values, tokens and versions, or the same exception, from the same page or watch event.

Property-based over pods, nodes, quotas and events whose every field read may be missing,
null, of the wrong type or junk, with fields nobody reads beside them; then the cases of
test_cluster_parse.py and the scenarios, which must decode without the fallback.
"""

from __future__ import annotations

import copy
import functools
import json
import random
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_objects import make_gpu_pod, make_node, make_quota, quota_refusal, scenarios
from kube_gpu_exporter.demo.kube_api import make_event
from kube_gpu_exporter.exporter.cluster import decode
from kube_gpu_exporter.exporter.cluster.parse import REQUIRED, parse_node, parse_pod, parse_quota
from kube_gpu_exporter.exporter.cluster.quota_events import parse_refusal
from kube_gpu_exporter.exporter.cluster.settings import DEFAULT_SETTINGS
from kube_gpu_exporter.exporter.kubernetes.decoding import JSON, Decoder

PROPERTY = settings(
    max_examples=200,
    derandomize=True,  # the same examples on every run: CI is reproducible
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DECODERS = decode.decoders(DEFAULT_SETTINGS)
PARSERS: dict[str, Callable[[Any], Any]] = {
    "nodes": parse_node,
    "pods": parse_pod,
    "resourcequotas": functools.partial(parse_quota, settings=DEFAULT_SETTINGS),
    "events": functools.partial(parse_refusal, settings=DEFAULT_SETTINGS),
}

# --- what the API could send: the fields read, each maybe absent, null, wrong or junk --------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),  # NaN, Infinity: JSON msgspec refuses
    st.text(max_size=8),
)
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
WORDS = st.sampled_from(["", "a", "gpu-a", "ml", "zone", "nvidia.com/gpu.product", "1"])
ABSENT = object()


def read(strategy: st.SearchStrategy[Any], odds: int = 7) -> st.SearchStrategy[Any]:
    """A field as read: `odds` to 1 of its type, else anything (null included). (one_of
    would not weigh: it draws each distinct strategy alike.)"""
    return st.sampled_from([True] * odds + [False]).flatmap(lambda ok: strategy if ok else JUNK)


def vital(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field most objects have right (an identity, the path to it): without it the object
    is dropped, and the rest of it would go untested."""
    return read(strategy, odds=30)


def obj(**known: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with most of `known` (each as `read`, or as drawn if already `vital`) and
    fields nobody reads."""
    extra = st.dictionaries(st.sampled_from(["x", "kind", "env", "image"]), JUNK, max_size=2)
    fields = st.fixed_dictionaries(
        {
            k: st.sampled_from([True] * 5 + [False]).flatmap(
                lambda here, s=s: read(s) if here else st.just(ABSENT)
            )
            for k, s in known.items()
        }
    )
    return st.tuples(extra, fields).map(
        lambda both: {**both[0], **{k: v for k, v in both[1].items() if v is not ABSENT}}
    )


def whole(**known: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object whose `known` fields (vital ones) are always there."""
    extra = st.dictionaries(st.sampled_from(["x", "kind"]), JUNK, max_size=1)
    fields = st.fixed_dictionaries({k: vital(s) for k, s in known.items()})
    return st.tuples(extra, fields).map(lambda both: {**both[0], **both[1]})


def items(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(read(strategy), max_size=3)


QUANTITY = st.one_of(
    st.sampled_from(["1", "250m", "64Gi", "1e3", "1.5", "-1", "", "x", "9999999Ei", " 2 "]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)
RESOURCE = st.sampled_from(
    ["cpu", "memory", "nvidia.com/gpu", "requests.nvidia.com/gpu", "nvidia.com/mig-1g.10gb", ""]
)
RESOURCES = st.dictionaries(RESOURCE, read(QUANTITY), max_size=4)
LABELS = st.dictionaries(WORDS, read(WORDS), max_size=3)
TIME = st.sampled_from(
    ["2024-05-01T10:00:00Z", "2024-05-01T10:00:00.5+02:00", "2024-05-01", "2024-13-01T00:00Z"]
)
CONDITION = obj(
    type=st.sampled_from(["PodScheduled", "DisruptionTarget", "Ready"]),
    status=st.sampled_from(["True", "False"]),
    reason=WORDS,
    lastTransitionTime=TIME,
)
CONTAINER = obj(
    name=WORDS,
    resources=obj(requests=RESOURCES, limits=RESOURCES, claims=items(obj(name=WORDS))),
    restartPolicy=st.sampled_from(["Always", "OnFailure"]),
)
REQUIREMENT = obj(
    key=WORDS,
    operator=st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Near"]),
    values=items(WORDS),
)
TERM = obj(matchExpressions=items(REQUIREMENT), matchFields=items(REQUIREMENT))
NODE_AFFINITY = obj(**{REQUIRED: obj(nodeSelectorTerms=items(TERM)), "preferred": JUNK})
NAMES = st.sampled_from(["", "a", "gpu-a", "ml"])
POD = whole(
    metadata=st.tuples(
        whole(name=NAMES, namespace=NAMES),
        obj(
            uid=WORDS,
            creationTimestamp=TIME,
            deletionTimestamp=TIME,
            resourceVersion=WORDS,
            ownerReferences=items(
                obj(uid=WORDS, controller=st.sampled_from([True, False, "true"]))
            ),
        ),
    ).map(lambda both: {**both[1], **both[0]}),
    spec=obj(
        nodeName=WORDS,
        containers=items(CONTAINER),
        initContainers=items(CONTAINER),
        resources=obj(requests=RESOURCES, limits=RESOURCES),
        overhead=RESOURCES,
        tolerations=items(
            obj(
                key=WORDS,
                operator=st.sampled_from(["Exists", "Equal"]),
                value=WORDS,
                effect=st.sampled_from(["NoSchedule", "NoExecute", ""]),
            )
        ),
        nodeSelector=LABELS,
        affinity=obj(nodeAffinity=NODE_AFFINITY, podAffinity=JUNK),
        schedulingGates=items(obj(name=WORDS)),
        resourceClaims=items(obj(name=WORDS)),
    ),
    status=obj(
        phase=st.sampled_from(["Pending", "Running", "Succeeded"]),
        nominatedNodeName=WORDS,
        reason=WORDS,
        conditions=items(CONDITION),
    ),
)
NODE = whole(
    metadata=st.tuples(whole(name=NAMES), obj(labels=LABELS, resourceVersion=WORDS)).map(
        lambda both: {**both[1], **both[0]}
    ),
    spec=obj(
        taints=items(obj(key=WORDS, value=WORDS, effect=WORDS)),
        unschedulable=st.booleans(),
    ),
    status=obj(allocatable=RESOURCES, conditions=items(CONDITION), images=JUNK),
)
QUOTA = whole(
    metadata=st.tuples(whole(name=NAMES, namespace=NAMES), obj(resourceVersion=WORDS)).map(
        lambda both: {**both[1], **both[0]}
    ),
    spec=obj(
        hard=RESOURCES,
        scopes=st.sampled_from([[], ["BestEffort"]]),
        scopeSelector=st.sampled_from([{}, {"matchExpressions": []}]),
    ),
    status=obj(hard=RESOURCES, used=RESOURCES),
)
REFUSAL = quota_refusal("gpu", {"requests.nvidia.com/gpu": "4", "requests.cpu": "2"})
EVENT = st.tuples(
    whole(
        metadata=st.tuples(
            whole(uid=NAMES), obj(namespace=NAMES, resourceVersion=WORDS, managedFields=JUNK)
        ).map(lambda both: {**both[1], **both[0]}),
        reason=st.sampled_from(["FailedCreate", "Created"]),
        type=st.sampled_from(["Warning", "Normal"]),
        message=st.sampled_from([REFUSAL, "(combined from similar events): " + REFUSAL, "x"]),
    ),
    obj(
        count=st.integers(min_value=-1, max_value=5),
        involvedObject=obj(namespace=WORDS),
        series=obj(count=st.integers(min_value=-1, max_value=9)),
    ),
).map(lambda both: {**both[1], **both[0]})
OBJECTS = {"pods": POD, "nodes": NODE, "resourcequotas": QUOTA, "events": EVENT}
KINDS = st.sampled_from(["pods", "pods", "pods", "nodes", "resourcequotas", "events"])
PAGES = KINDS.flatmap(
    lambda kind: st.tuples(
        st.just(kind),
        st.tuples(
            whole(items=st.lists(read(OBJECTS[kind]), min_size=1, max_size=4)),
            obj(metadata=obj(resourceVersion=WORDS, **{"continue": WORDS})),
        ).map(lambda both: {**both[1], **both[0]}),
    )
)
EVENTS = KINDS.flatmap(
    lambda kind: st.tuples(
        st.just(kind),
        st.one_of(
            obj(
                type=st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]),
                object=OBJECTS[kind],
            ),
            obj(type=st.just("ERROR"), object=obj(code=st.just(410), message=WORDS)),
            JUNK,
        ),
    )
)

# --- the comparison --------------------------------------------------------------------------


def _page(decoder: Decoder, kind: str, data: bytes) -> Any:
    try:
        page = decoder.page(data)
        return [PARSERS[kind](item) for item in page.items], page.token, page.version
    except Exception as exc:
        return type(exc)


def _event(decoder: Decoder, kind: str, line: bytes) -> Any:
    try:
        event = decoder.event(line)
    except Exception as exc:
        return type(exc)
    parsed = dict(event.obj) if event.kind == "ERROR" else PARSERS[kind](event.obj)
    return event.kind, parsed, event.version


def assert_same(old: Any, new: Any) -> None:
    """Equal, and alike in every type down the values (repr tells 1 from 1.0 and True)."""
    assert new == old
    assert repr(new) == repr(old)


@PROPERTY
@given(PAGES)
def test_a_page_decodes_to_what_json_and_parse_make(case: tuple[str, Any]) -> None:
    kind, body = case
    data = json.dumps(body).encode()
    assert_same(_page(JSON, kind, data), _page(DECODERS[kind], kind, data))
    # The token read ahead of the items (for the next page's prefetch) is the page's own
    # when the page reads; it never raises (a page that fails fails in `page`).
    for decoder in (JSON, DECODERS[kind]):
        page = _page(decoder, kind, data)
        ahead = decoder.token(data)
        if isinstance(page, tuple) and ahead:
            assert ahead == page[1]


@PROPERTY
@given(EVENTS)
def test_a_watch_event_decodes_to_what_json_and_parse_make(case: tuple[str, Any]) -> None:
    kind, event = case
    line = json.dumps(event).encode()
    assert_same(_event(JSON, kind, line), _event(DECODERS[kind], kind, line))


# --- the cases of test_cluster_parse.py, the scenarios, and their mutations ------------------


def _parse_cases() -> list[tuple[str, dict[str, Any]]]:
    """The objects test_cluster_parse.py reads, and every scenario's."""
    pod = make_gpu_pod(
        "train",
        2,
        node_selector={"nvidia.com/gpu.product": "A100"},
        affinity_terms=[
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        ],
        gates=["kueue.x-k8s.io/admission"],
        nominated="gpu-a",
    )
    pod["metadata"]["deletionTimestamp"] = "2024-05-01T11:00:00Z"
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
    pod["spec"]["initContainers"] = [
        {"name": "setup", "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}},
        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
    ]
    pod["spec"]["overhead"] = {"cpu": "100m", "memory": "64Mi"}
    pod["spec"]["resources"] = {"requests": {"cpu": "2"}, "limits": {"memory": "4Gi"}}
    pod["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    )
    quota = make_quota("q", hard=0, used=0)
    quota["spec"]["hard"]["requests.cpu"] = "10"
    quota["spec"]["scopes"] = ["BestEffort"]
    cases = [
        ("pods", pod),
        ("nodes", make_node("gpu-a", gpus=0, unschedulable=True, ready=False)),
        ("resourcequotas", quota),
        ("resourcequotas", make_quota("new", hard=2, used=None)),
        ("pods", {"metadata": {"name": "x"}}),
        ("nodes", {}),
        ("events", make_event("e1", "ml", message=REFUSAL, count=3)),
    ]
    for version, (_, case) in enumerate(cases):
        case.setdefault("metadata", {})["resourceVersion"] = str(version)
    for scenario in scenarios():
        cases += [("nodes", n) for n in scenario.nodes]
        cases += [("pods", p) for p in (*scenario.bound, scenario.subject)]
        cases += [("resourcequotas", q) for q in scenario.quotas]
    return cases


def _mutated(obj: Any, rng: random.Random) -> Any:
    """`obj` with one value somewhere replaced by junk of another type, or removed (as
    test_cluster_parse.py's fuzz does)."""
    junk: list[Any] = [None, 7, -1.5, "", "x", [], {}, [1, "a", None], {"a": [None]}, True]
    path: list[Any] = []
    node = obj
    while isinstance(node, dict | list) and node and rng.random() < 0.8:
        key = rng.choice(list(node) if isinstance(node, dict) else range(len(node)))
        path.append(key)
        node = node[key]
    if not path:
        return rng.choice(junk)
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and rng.random() < 0.2:
        del parent[path[-1]]
    else:
        parent[path[-1]] = rng.choice(junk)
    return obj


def _list(objects: list[Any]) -> bytes:
    return json.dumps({"metadata": {"resourceVersion": "7"}, "items": objects}).encode()


def test_the_parse_cases_decode_alike_without_the_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Well-formed objects take msgspec's path alone: json.loads is never called for them."""
    cases = _parse_cases()
    expected = {
        kind: _page(JSON, kind, _list([o for k, o in cases if k == kind])) for kind in OBJECTS
    }
    monkeypatch.setattr(decode, "JSON", None)  # the fallback would fail
    monkeypatch.setattr(decode.json, "loads", None)
    for kind in OBJECTS:
        assert_same(
            expected[kind], _page(DECODERS[kind], kind, _list([o for k, o in cases if k == kind]))
        )


def test_mutated_cases_decode_alike_in_pages_and_events() -> None:
    """1,000 pages of the cases, one value in each object broken: each object is read as
    json.loads and parse.py read it, the others in its page by msgspec still."""
    rng = random.Random(17)
    cases = _parse_cases()
    for _ in range(1000):
        kind = rng.choice(sorted(OBJECTS))
        objects = [copy.deepcopy(o) for k, o in cases if k == kind]
        objects = [_mutated(o, rng) if rng.random() < 0.5 else o for o in objects]
        data = _list(objects)
        assert_same(_page(JSON, kind, data), _page(DECODERS[kind], kind, data))
        line = json.dumps({"type": "MODIFIED", "object": rng.choice(objects)}).encode()
        assert_same(_event(JSON, kind, line), _event(DECODERS[kind], kind, line))


def test_a_list_without_version_and_one_with_null_differ_as_before() -> None:
    """str(None) is what the JSON path resumed from: kept, however odd."""
    for body, version in (
        ({"metadata": {}}, ""),
        ({"metadata": {"resourceVersion": None}}, "None"),
    ):
        assert DECODERS["pods"].page(json.dumps(body).encode()).version == version
        assert JSON.page(json.dumps(body).encode()).version == version


def test_lists_longer_than_read_are_cut_alike() -> None:
    """fields.MAX_ITEMS containers are read of a pod, however many it has."""
    pod = make_gpu_pod("many", 1)
    pod["spec"]["containers"] *= 1500
    data = _list([pod])
    old, new = _page(JSON, "pods", data), _page(DECODERS["pods"], "pods", data)
    assert_same(old, new)
    assert old[0][0].requests["nvidia.com/gpu"] == 1000


def test_serve_never_loads_msgspec() -> None:
    """msgspec is the cluster command's: serve, the node path's watches and the modules
    that name the cluster watches' types do not import it."""
    code = (
        "import sys\n"
        "import kube_gpu_exporter.exporter.cli, kube_gpu_exporter.exporter.app\n"
        "import kube_gpu_exporter.exporter.kubernetes.pods\n"
        "import kube_gpu_exporter.exporter.kubernetes.resource_slices\n"
        "import kube_gpu_exporter.exporter.serve.cluster_loop\n"
        "import kube_gpu_exporter.exporter.cluster.watches\n"
        "assert 'msgspec' not in sys.modules, 'msgspec imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
