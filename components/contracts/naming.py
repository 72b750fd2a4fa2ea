"""Named registries: the one place a name in params (`train.advantage.estimator: grpo`) meets code.

Every family of pluggable functions (rewards, advantage estimators, loss types, policy losses,
clusterers, engines, answer normalisers) keeps its members in a `NameRegistry`:

    ADVANTAGES = NameRegistry[AdvantageFn]("advantage estimator")

    @ADVANTAGES.register("grpo")
    def grpo_advantage(...): ...

    ADVANTAGES.get("grpo")          # the function
    ADVANTAGES.get("ppo")           # UnknownNameError: unknown advantage estimator 'ppo'; known: ['grpo', ...]

A name is registered once (a second registration is a `ValueError`); an unknown name raises
`UnknownNameError`, whose message names the kind, the unknown name(s) and every known name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

from components.contracts.errors import UserError

T = TypeVar("T")
F = TypeVar("F")


class UnknownNameError(UserError, ValueError, KeyError):
    """A name that is not registered; the message lists the known names.

    A `ValueError` (a bad value in params) and a `KeyError` (a failed look-up), so code that caught
    either before registries shared this error still catches it.
    """

    def __init__(self, kind: str, names: str | Sequence[str] = (), known: Iterable[str] = (), where: str = ""):
        self.kind = kind
        self.names = [names] if isinstance(names, str) else list(names)
        self.known = sorted(known)
        self.where = where
        shown = repr(self.names[0]) if len(self.names) == 1 else repr(self.names)
        message = f"unknown {kind} {shown}; known: {self.known}"
        super().__init__(f"{where}: {message}" if where else message)

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class NameRegistry(Generic[T]):
    """Values of one kind (functions, factories) by unique name."""

    def __init__(self, kind: str):
        self.kind = kind  # what a value is, in messages: "reward", "loss type", ...
        self._entries: dict[str, T] = {}

    def add(self, name: str, value: T) -> T:
        """Register `value` under `name` (a name may be registered once)."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = value
        return value

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: register the decorated function (or class) itself under `name`."""

        def decorator(value: F) -> F:
            self.add(name, value)  # type: ignore[arg-type]
            return value

        return decorator

    def get(self, name: str, where: str = "") -> T:
        """The value registered as `name`; `where` (a params field) prefixes the unknown-name error."""
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._entries, where) from None

    def check(self, names: Iterable[str], where: str = "") -> None:
        """Raise `UnknownNameError` listing every name of `names` that is not registered."""
        unknown = [n for n in names if n not in self._entries]
        if unknown:
            raise UnknownNameError(self.kind, unknown, self._entries, where)

    def pop(self, name: str) -> T:
        """Unregister `name` (tests register throwaway entries)."""
        if name not in self._entries:
            raise UnknownNameError(self.kind, name, self._entries)
        return self._entries.pop(name)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        return sorted(self._entries.items())

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"NameRegistry({self.kind!r}: {self.names()})"
