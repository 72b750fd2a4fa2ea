"""The tags of a registered model version: one encoder (`VersionTags.to_tags`), one decoder
(`VersionTags.from_tags`).

`register` writes them with the version (the gate verdicts, the metrics they were judged on, the
provenance and the fingerprint), `promote` and `rollback` add their records, and the promotion
check, the champion gates and `groupwise versions` read them back. MLflow stores tags as strings;
the schema, key by key:

    gate.passed                     "true" | "false": the registration gates' verdict
    gate.<gate>                     "pass" | "fail": one gate's verdict
    gate.<gate>.{value,threshold}   repr(float) of what the gate measured (absent: undefined) and its limit
    gate.<gate>.reason              the gate's reason, in words
    gate.champion_at_registration   the champion's version when registered, "none" without one
    metric.<section>.<key>          repr(float) of a finite number of metrics.json ("0.088")
    data.sha256, data.dvc_md5       the group files (this hasher's digest, DVC's folder md5)
    data.train_groups, data.train_prompts   the training data's size: groups (rows) and their prompts
    params.hash, git.commit         the params and the code that registered the version
    git.dirty, git.diff_sha256      "true" | "false" | "unknown": uncommitted code changes; their digest when dirty
    git.evaluated_commit            the code that evaluated it (metrics.json's `code`; its `+dirty.<digest>` when dirty)
    dvc.checkpoint_md5              DVC's md5 of the checkpoint folder (dvc.lock's `train` out; `dvc exp show` finds it)
    param.<section>.<key>           one training-relevant param as registered ("0.0002", "grpo", '["q_proj"]')
    groupwise.fingerprint           adapter + metrics digest: the same registration gives the same version
    promotion.{by,at,reason,forced,previous_champion,check}    who promoted it, when and why
    rollback.{by,at,reason,restored}                           who demoted it, when and why

Any other tag (MLflow's own, the artifact manifest's) is kept verbatim in `other`, so
`from_tags(tags).to_tags() == tags` for every tag set this schema wrote.

What the champion gates compare with, `Champion` (a version and the metrics recorded with it), and
the shape of a promotion check (`PromotionCheck`: the registry's policy, run by the tracking
package's `promote` under its lock) are defined here too, so the policy and the MLflow side of
promotion meet on this floor rather than importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import ClassVar, Protocol

GATE_PREFIX = "gate."
METRIC_PREFIX = "metric."
PARAM_PREFIX = "param."
GATE_PASSED_TAG = "gate.passed"
CHAMPION_AT_REGISTRATION_TAG = "gate.champion_at_registration"
FINGERPRINT_TAG = "groupwise.fingerprint"
NO_CHAMPION = "none"
_VERDICTS = {"pass": True, "fail": False}


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _float(text: str) -> float | None:
    """The tag's number, or None when it is not one."""
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class _TagRecord:
    """A group of tags `<prefix><field>`; a field is None when its tag is absent."""

    PREFIX = ""
    BOOLEAN: ClassVar[frozenset[str]] = frozenset()  # fields stored as "true" / "false"
    INTEGER: ClassVar[frozenset[str]] = frozenset()  # fields stored as decimal integers

    @classmethod
    def tag(cls, name: str) -> str:
        return f"{cls.PREFIX}{name}"

    def to_tags(self) -> dict[str, str]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[self.tag(f.name)] = _flag(value) if isinstance(value, bool) else str(value)
        return out

    @classmethod
    def pop_from(cls, tags: dict[str, str]):
        """The record from `tags` (its keys removed from the dict), or None when none is there; an
        integer field that does not parse stays in `tags`, verbatim."""
        found = {f.name: tags.pop(cls.tag(f.name)) for f in fields(cls) if cls.tag(f.name) in tags}
        for name in cls.INTEGER & set(found):
            try:
                found[name] = int(found[name])
            except ValueError:
                tags[cls.tag(name)] = found.pop(name)
        if not found:
            return None
        for name in cls.BOOLEAN & set(found):
            found[name] = found[name].lower() == "true"
        return cls(**found)


@dataclass(frozen=True)
class Provenance(_TagRecord):
    """What a version was built from: group files (and how many it trained on), params and code."""

    INTEGER = frozenset({"train_groups", "train_prompts"})
    data_sha256: str | None = None
    data_dvc_md5: str | None = None
    params_hash: str | None = None
    git_commit: str | None = None
    git_dirty: str | None = None  # "true" | "false" | "unknown" (not a git checkout)
    git_diff_sha256: str | None = None
    evaluated_commit: str | None = None
    checkpoint_dvc_md5: str | None = None
    train_groups: int | None = None  # train-split groups of train.tasks / train.domains (one row each)
    train_prompts: int | None = None  # their prompts (members), each sampled K times a step

    @classmethod
    def tag(cls, name: str) -> str:
        return {"data_sha256": "data.sha256", "data_dvc_md5": "data.dvc_md5", "params_hash": "params.hash",
                "git_commit": "git.commit", "git_dirty": "git.dirty", "git_diff_sha256": "git.diff_sha256",
                "evaluated_commit": "git.evaluated_commit", "checkpoint_dvc_md5": "dvc.checkpoint_md5",
                "train_groups": "data.train_groups",
                "train_prompts": "data.train_prompts"}[name]  # fmt: skip


@dataclass(frozen=True)
class GateDetail:
    """What one gate measured, against which threshold, and why it decided as it did."""

    value: float | None = None  # None: undefined (e.g. not judged)
    threshold: float | None = None
    reason: str | None = None

    def to_tags(self, gate: str) -> dict[str, str]:
        numbers = {"value": self.value, "threshold": self.threshold}
        out = {f"{GATE_PREFIX}{gate}.{key}": repr(float(v)) for key, v in numbers.items() if v is not None}
        return out | ({f"{GATE_PREFIX}{gate}.reason": self.reason} if self.reason is not None else {})

    @classmethod
    def pop_from(cls, tags: dict[str, str]) -> dict[str, "GateDetail"]:
        """{gate: detail} from the `gate.<gate>.<field>` tags (removed from the dict); a value or
        threshold that does not parse stays in `tags`, verbatim."""
        found: dict[str, dict] = {}
        for key in [k for k in tags if k.startswith(GATE_PREFIX)]:
            gate, _, name = key[len(GATE_PREFIX) :].rpartition(".")
            if not gate or name not in ("value", "threshold", "reason"):
                continue
            if name == "reason":
                found.setdefault(gate, {})[name] = tags.pop(key)
            elif (number := _float(tags[key])) is not None:
                found.setdefault(gate, {})[name] = number
                del tags[key]
        return {gate: cls(**parts) for gate, parts in found.items()}


@dataclass(frozen=True)
class PromotionRecord(_TagRecord):
    """Who made the version champion, when, why, over which champion, and the check's verdict."""

    PREFIX = "promotion."
    BOOLEAN = frozenset({"forced"})
    by: str | None = None
    at: str | None = None
    reason: str | None = None
    forced: bool | None = None
    previous_champion: str | None = None  # "none": there was no champion
    check: str | None = None  # "pass" or "fail: <reasons>"


@dataclass(frozen=True)
class RollbackRecord(_TagRecord):
    """Who took the champion alias from the version, when, why, and which version got it back."""

    PREFIX = "rollback."
    by: str | None = None
    at: str | None = None
    reason: str | None = None
    restored: str | None = None


@dataclass(frozen=True)
class VersionTags:
    """Every tag of a registered version, typed (see the module docstring for the keys)."""

    gate_passed: bool | None = None  # None: no gate record (a version registered by hand)
    gates: dict[str, bool] = field(default_factory=dict)  # gate name -> passed
    gate_details: dict[str, GateDetail] = field(default_factory=dict)  # gate name -> value, threshold, reason
    champion_at_registration: str | None = None  # NO_CHAMPION: there was none
    metrics: dict[str, float] = field(default_factory=dict)  # dotted metrics.json path -> value
    provenance: Provenance | None = None
    params: dict[str, str] = field(default_factory=dict)  # dotted params.yaml path -> value as registered
    fingerprint: str | None = None
    promotion: PromotionRecord | None = None
    rollback: RollbackRecord | None = None
    other: dict[str, str] = field(default_factory=dict)  # tags outside this schema, verbatim

    def to_tags(self) -> dict[str, str]:
        tags: dict[str, str] = {}
        if self.gate_passed is not None:
            tags[GATE_PASSED_TAG] = _flag(self.gate_passed)
        tags |= {f"{GATE_PREFIX}{name}": "pass" if passed else "fail" for name, passed in self.gates.items()}
        for name, detail in self.gate_details.items():
            tags |= detail.to_tags(name)
        if self.champion_at_registration is not None:
            tags[CHAMPION_AT_REGISTRATION_TAG] = self.champion_at_registration
        tags |= {f"{METRIC_PREFIX}{path}": repr(float(value)) for path, value in self.metrics.items()}
        tags |= {f"{PARAM_PREFIX}{path}": value for path, value in self.params.items()}
        for record in (self.provenance, self.promotion, self.rollback):
            if record is not None:
                tags |= record.to_tags()
        if self.fingerprint is not None:
            tags[FINGERPRINT_TAG] = self.fingerprint
        return {**tags, **self.other}

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> "VersionTags":
        """Decode a version's tags; an unparsable metric or verdict stays in `other`, verbatim."""
        rest = {str(k): str(v) for k, v in tags.items()}
        passed = rest.pop(GATE_PASSED_TAG, None)
        champion = rest.pop(CHAMPION_AT_REGISTRATION_TAG, None)
        fingerprint = rest.pop(FINGERPRINT_TAG, None)
        provenance, promotion, rollback = Provenance.pop_from(rest), PromotionRecord.pop_from(rest), RollbackRecord.pop_from(rest)
        details = GateDetail.pop_from(rest)
        params = {key[len(PARAM_PREFIX) :]: rest.pop(key) for key in list(rest) if key.startswith(PARAM_PREFIX)}
        gates, metrics = {}, {}
        for key in list(rest):
            if key.startswith(GATE_PREFIX) and rest[key] in _VERDICTS:
                gates[key[len(GATE_PREFIX) :]] = _VERDICTS[rest.pop(key)]
            elif key.startswith(METRIC_PREFIX) and (number := _float(rest[key])) is not None:
                metrics[key[len(METRIC_PREFIX) :]] = number
                del rest[key]
        return cls(
            gate_passed=None if passed is None else passed.lower() == "true",
            gates=gates,
            gate_details=details,
            champion_at_registration=champion,
            metrics=metrics,
            provenance=provenance,
            params=params,
            fingerprint=fingerprint,
            promotion=promotion,
            rollback=rollback,
            other=rest,
        )

    def gate_tags(self) -> dict[str, str]:
        """The gate record alone, encoded: gate.passed, gate.<gate> and gate.champion_at_registration."""
        record = VersionTags(gate_passed=self.gate_passed, gates=self.gates, champion_at_registration=self.champion_at_registration)
        return record.to_tags()

    def failed_gates(self) -> list[str]:
        """Names of the gates recorded as failed, sorted."""
        return sorted(name for name, passed in self.gates.items() if not passed)

    def metrics_tree(self) -> dict:
        """The recorded metrics as nested dicts, like metrics.json: {'consistency': {'p_value': 0.088}}."""
        tree: dict = {}
        for path, value in self.metrics.items():
            *parents, leaf = path.split(".")
            node = tree
            for part in parents:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    break
            else:
                node[leaf] = value
        return tree


@dataclass(frozen=True)
class Champion:
    """The version that holds the champion alias, with the metrics recorded when it was registered."""

    version: str
    metrics: dict  # nested like metrics.json (`VersionTags.metrics_tree`)

    @classmethod
    def of(cls, version: object, tags: Mapping[str, str]) -> "Champion":
        """The champion from a registered version's number and tags."""
        return cls(str(version), VersionTags.from_tags(tags).metrics_tree())


class Verdict(Protocol):
    """A check's outcome (`components.release.gate.GateDecision`)."""

    passed: bool

    def reasons(self) -> list[str]: ...


# (the version's tags, the reigning champion or None) -> verdict: may the version become champion?
PromotionCheck = Callable[[VersionTags, Champion | None], Verdict]
