"""The tags of a registered model version: one encoder (`VersionTags.to_tags`), one decoder
(`VersionTags.from_tags`).

`register` writes them with the version (the gate verdicts, the metrics they were judged on, the
provenance and the fingerprint), `promote` and `rollback` add their records, and the promotion
check, the champion gates and `groupwise versions` read them back. MLflow stores tags as strings;
the schema, key by key:

    gate.passed                     "true" | "false": the registration gates' verdict
    gate.<gate>                     "pass" | "fail": one gate's verdict
    gate.champion_at_registration   the champion's version when registered, "none" without one
    metric.<section>.<key>          repr(float) of a finite number of metrics.json ("0.088")
    data.sha256, data.dvc_md5       the group files (this hasher's digest, DVC's folder md5)
    params.hash, git.commit         the params and the code
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
GATE_PASSED_TAG = "gate.passed"
CHAMPION_AT_REGISTRATION_TAG = "gate.champion_at_registration"
FINGERPRINT_TAG = "groupwise.fingerprint"
NO_CHAMPION = "none"
_VERDICTS = {"pass": True, "fail": False}


def _flag(value: bool) -> str:
    return "true" if value else "false"


@dataclass(frozen=True)
class _TagRecord:
    """A group of tags `<prefix><field>`; a field is None when its tag is absent."""

    PREFIX = ""
    BOOLEAN: ClassVar[frozenset[str]] = frozenset()  # fields stored as "true" / "false"

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
        """The record from `tags` (its keys removed from the dict), or None when none is there."""
        found = {f.name: tags.pop(cls.tag(f.name)) for f in fields(cls) if cls.tag(f.name) in tags}
        if not found:
            return None
        for name in cls.BOOLEAN & set(found):
            found[name] = found[name].lower() == "true"
        return cls(**found)


@dataclass(frozen=True)
class Provenance(_TagRecord):
    """What a version was built from: group files, params and code."""

    data_sha256: str | None = None
    data_dvc_md5: str | None = None
    params_hash: str | None = None
    git_commit: str | None = None

    @classmethod
    def tag(cls, name: str) -> str:
        return {"data_sha256": "data.sha256", "data_dvc_md5": "data.dvc_md5", "params_hash": "params.hash",
                "git_commit": "git.commit"}[name]  # fmt: skip


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
    champion_at_registration: str | None = None  # NO_CHAMPION: there was none
    metrics: dict[str, float] = field(default_factory=dict)  # dotted metrics.json path -> value
    provenance: Provenance | None = None
    fingerprint: str | None = None
    promotion: PromotionRecord | None = None
    rollback: RollbackRecord | None = None
    other: dict[str, str] = field(default_factory=dict)  # tags outside this schema, verbatim

    def to_tags(self) -> dict[str, str]:
        tags: dict[str, str] = {}
        if self.gate_passed is not None:
            tags[GATE_PASSED_TAG] = _flag(self.gate_passed)
        tags |= {f"{GATE_PREFIX}{name}": "pass" if passed else "fail" for name, passed in self.gates.items()}
        if self.champion_at_registration is not None:
            tags[CHAMPION_AT_REGISTRATION_TAG] = self.champion_at_registration
        tags |= {f"{METRIC_PREFIX}{path}": repr(float(value)) for path, value in self.metrics.items()}
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
        gates, metrics = {}, {}
        for key in list(rest):
            if key.startswith(GATE_PREFIX) and rest[key] in _VERDICTS:
                gates[key[len(GATE_PREFIX):]] = _VERDICTS[rest.pop(key)]
            elif key.startswith(METRIC_PREFIX):
                try:
                    metrics[key[len(METRIC_PREFIX):]] = float(rest[key])
                except ValueError:
                    continue
                del rest[key]
        return cls(
            gate_passed=None if passed is None else passed.lower() == "true",
            gates=gates,
            champion_at_registration=champion,
            metrics=metrics,
            provenance=provenance,
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
    """A check's outcome (`components.registry.gate.GateDecision`)."""

    passed: bool

    def reasons(self) -> list[str]: ...


# (the version's tags, the reigning champion or None) -> verdict: may the version become champion?
PromotionCheck = Callable[[VersionTags, Champion | None], Verdict]
