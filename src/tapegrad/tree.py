"""Nested containers of arrays (lists, tuples, dicts): flatten and rebuild.

``xs`` and ``ys`` of :func:`tapegrad.gradients` and the arguments of
:func:`tapegrad.grad` may be nested structures; results keep the structure.
"""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

__all__ = ["flatten", "unflatten", "tree_map"]

_LEAF = "leaf"


def flatten(tree: Any) -> Tuple[List[Any], Any]:
    """Return the leaves of ``tree`` (left to right) and a description of its structure."""
    leaves: List[Any] = []

    def walk(node: Any) -> Any:
        t = type(node)
        if t is list or t is tuple:
            return (t, [walk(c) for c in node])
        if t is dict:
            return (dict, [(k, walk(node[k])) for k in node])
        if isinstance(node, tuple) and hasattr(node, "_fields"):  # named tuple
            return (t, [walk(c) for c in node])
        leaves.append(node)
        return _LEAF

    structure = walk(tree)
    del walk  # the closure refers to itself: break that cycle so the leaves are freed at once
    return leaves, structure


def unflatten(structure: Any, leaves: List[Any]) -> Any:
    """Inverse of :func:`flatten`."""
    it = iter(leaves)

    def build(s: Any) -> Any:
        if s is _LEAF:
            return next(it)
        kind, children = s
        if kind is dict:
            return {k: build(c) for k, c in children}
        if kind is list:
            return [build(c) for c in children]
        if kind is tuple:
            return tuple(build(c) for c in children)
        return kind(*[build(c) for c in children])

    tree = build(structure)
    del build  # break the self-referencing closure cycle (it holds the leaves)
    return tree


def tree_map(fun: Callable[[Any], Any], tree: Any) -> Any:
    """Apply ``fun`` to every leaf."""
    leaves, structure = flatten(tree)
    return unflatten(structure, [fun(x) for x in leaves])


def flatten_up_to(structure: Any, tree: Any) -> List[Any]:
    """Leaves of ``tree`` at the leaf positions of ``structure`` (from :func:`flatten`).

    ``grad_ys=[[[1]], [[2]]]`` for two targets is two leaves, ``[[1]]`` and
    ``[[2]]``, not four numbers: the targets' structure says where leaves are.
    """
    out: List[Any] = []

    def walk(s: Any, node: Any) -> None:
        if s is _LEAF:
            out.append(node)
            return
        kind, children = s
        if kind is dict:
            if not isinstance(node, dict) or set(node) != {k for k, _ in children}:
                raise ValueError("the structure does not match the targets' structure")
            for k, c in children:
                walk(c, node[k])
            return
        if not isinstance(node, (list, tuple)) or len(node) != len(children):
            raise ValueError(
                f"the structure does not match the targets' structure: expected a sequence of "
                f"{len(children)}, got {type(node).__name__}"
            )
        for c, n in zip(children, node):
            walk(c, n)

    walk(structure, tree)
    del walk  # break the self-referencing closure cycle (it holds the leaves)
    return out
