"""Record: a class whose annotated attributes are its fields, as @dataclass makes one,
without @dataclass's cost at import.

@dataclass imports `inspect` (with `ast`, `dis` and `tokenize`) and writes and compiles
each class's methods when its module loads: for the settings, the job spec, the submit
options and the chip shapes, more than half of what `tpuq submit` cost on top of the
interpreter before it reached the agent. A Record's methods are written once, here.

    class Bounds(Record, frozen=True):
        chips: int
        bounds: str
        verified: bool = False

A field without a default must be given; a list, dict or set default is copied for
each record; `field(default_factory=f)` calls f for each. Arguments are given by keyword or
in field order. `frozen=True` refuses assignment and makes records hashable by value.
Type checkers read a Record as a dataclass (`dataclass_transform`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeVar

    R = TypeVar("R", bound="Record")
    T = TypeVar("T")
if TYPE_CHECKING:
    from typing import dataclass_transform  # novm: type checkers only (3.11)
else:
    def dataclass_transform(**_: object) -> object:
        return lambda cls: cls


class _Missing:
    def __repr__(self) -> str:
        return "<required>"


MISSING = _Missing()


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def field(*, default_factory: Callable[[], T]) -> T:
    """A field whose default `default_factory()` makes for each record."""
    made: Any = _Factory(default_factory)
    return made  # type: ignore[no-any-return]


@dataclass_transform(field_specifiers=(field,))
class Record:
    # (name, annotation, default) of every field, a base class's first
    _fields: ClassVar[tuple[tuple[str, str, Any], ...]] = ()
    _frozen: ClassVar[bool] = False

    def __init_subclass__(cls, frozen: bool = False, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        fields = {name: (name, kind, default) for name, kind, default in cls._fields}
        for name, kind in cls.__dict__.get("__annotations__", {}).items():
            kind = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
            if not kind.startswith("ClassVar"):
                fields[name] = (name, kind, cls.__dict__.get(name, MISSING))
        cls._fields = tuple(fields.values())
        if frozen:
            cls._frozen = True
            cls.__hash__ = Record._hash  # type: ignore[method-assign,assignment]

    def __init__(self, *args: Any, **values: Any) -> None:
        if len(args) > len(self._fields):
            raise TypeError(f"{type(self).__name__}: {len(args)} values for "
                            f"{len(self._fields)} fields")
        for (name, _, _), value in zip(self._fields, args):
            if name in values:
                raise TypeError(f"{type(self).__name__}: {name} given twice")
            values[name] = value
        put = object.__setattr__
        for name, _, default in self._fields:
            if name in values:
                put(self, name, values.pop(name))
            elif default is MISSING:
                raise TypeError(f"{type(self).__name__}: {name} is required")
            elif isinstance(default, _Factory):
                put(self, name, default.make())
            elif isinstance(default, (list, dict, set)):
                put(self, name, type(default)(default))
            else:
                put(self, name, default)
        if values:
            raise TypeError(f"{type(self).__name__}: unknown fields {', '.join(values)}")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(name for name, _, _ in cls._fields)

    @classmethod
    def field_kinds(cls) -> dict[str, str]:
        """Each field's annotation, as written."""
        return {name: kind for name, kind, _ in cls._fields}

    def replace(self: R, **changes: Any) -> R:
        return type(self)(**{**self.as_dict(), **changes})

    def as_dict(self) -> dict[str, Any]:
        """The fields' values (not copied)."""
        return {name: getattr(self, name) for name, _, _ in self._fields}

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise AttributeError(f"cannot assign to field {name!r} of a frozen "
                              f"{type(self).__name__}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if self._frozen:
            raise AttributeError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")
        object.__delattr__(self, name)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name, _, _ in self._fields)

    def _hash(self) -> int:
        return hash(self._values())

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Record)
        return self._values() == other._values()

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name, _, _ in self._fields)
        return f"{type(self).__name__}({shown})"
