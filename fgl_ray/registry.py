"""Name -> object registries with errors that list the valid choices."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class UnknownNameError(ValueError):
    """A name that is not registered; the message lists the valid names."""


class Registry(Generic[T]):
    """A small mapping from names to registered objects (classes or functions).

    Args:
        kind: what the registry holds, used in error messages ("algorithm", ...).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that registers an object under ``name``."""

        def add(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        """Returns the object for ``name`` or raises with the valid names."""
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}{did_you_mean(name, self.names())}; valid {self.kind}s: "
                f"{', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def did_you_mean(name: object, names: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``names``, a note on characters outside ASCII
    (a Cyrillic 'с' reads like a Latin 'c'), or ``""``."""
    import difflib

    if not isinstance(name, str):
        return ""
    odd = sorted({char for char in name if not char.isascii()})
    close = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.6)
    parts = ([f"did you mean {close[0]!r}?"] if close else []) + (
        [f"the name holds the non-ASCII {', '.join(map(repr, odd))}"] if odd else [])
    return f" ({' '.join(parts)})" if parts else ""
