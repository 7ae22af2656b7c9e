"""Nested containers of arrays (lists, tuples, dicts): flatten and rebuild.

``xs`` and ``ys`` of :func:`tapegrad.gradients` and the arguments of
:func:`tapegrad.grad` may be nested structures; results keep the structure.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, List, Tuple

__all__ = ["flatten", "unflatten", "tree_map"]

_LEAF = "leaf"


def _describe(node: Any, leaves: List[Any]) -> Any:
    t = type(node)
    if t is list or t is tuple:
        return (t, [_describe(c, leaves) for c in node])
    if t is dict:
        return (dict, [(k, _describe(node[k], leaves)) for k in node])
    if isinstance(node, tuple) and hasattr(node, "_fields"):  # named tuple
        return (t, [_describe(c, leaves) for c in node])
    leaves.append(node)
    return _LEAF


def flatten(tree: Any) -> Tuple[List[Any], Any]:
    """Return the leaves of ``tree`` (left to right) and a description of its structure."""
    # Module-level recursion, not a self-referencing closure: a closure cycle would
    # keep every leaf (and so whole tapes) alive until the garbage collector runs.
    leaves: List[Any] = []
    return leaves, _describe(tree, leaves)


def _build(structure: Any, leaves: Iterator[Any]) -> Any:
    if structure is _LEAF:
        return next(leaves)
    kind, children = structure
    if kind is dict:
        return {k: _build(c, leaves) for k, c in children}
    if kind is list:
        return [_build(c, leaves) for c in children]
    if kind is tuple:
        return tuple(_build(c, leaves) for c in children)
    return kind(*[_build(c, leaves) for c in children])


def unflatten(structure: Any, leaves: List[Any]) -> Any:
    """Inverse of :func:`flatten`."""
    return _build(structure, iter(leaves))


def tree_map(fun: Callable[[Any], Any], tree: Any) -> Any:
    """Apply ``fun`` to every leaf."""
    leaves, structure = flatten(tree)
    return unflatten(structure, [fun(x) for x in leaves])


def _leaves_at(structure: Any, node: Any, out: List[Any]) -> None:
    if structure is _LEAF:
        out.append(node)
        return
    kind, children = structure
    if kind is dict:
        if not isinstance(node, dict) or set(node) != {k for k, _ in children}:
            raise ValueError("the structure does not match the targets' structure")
        for k, c in children:
            _leaves_at(c, node[k], out)
        return
    if not isinstance(node, (list, tuple)) or len(node) != len(children):
        raise ValueError(
            f"the structure does not match the targets' structure: expected a sequence of "
            f"{len(children)}, got {type(node).__name__}"
        )
    for c, n in zip(children, node):
        _leaves_at(c, n, out)


def flatten_up_to(structure: Any, tree: Any) -> List[Any]:
    """Leaves of ``tree`` at the leaf positions of ``structure`` (from :func:`flatten`).

    ``grad_ys=[[[1]], [[2]]]`` for two targets is two leaves, ``[[1]]`` and
    ``[[2]]``, not four numbers: the targets' structure says where leaves are.
    """
    out: List[Any] = []
    _leaves_at(structure, tree, out)
    return out
