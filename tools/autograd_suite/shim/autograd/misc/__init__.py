from .flatten import flatten, flatten_func  # noqa: F401
from .tracers import const_graph, const_graph_unary  # noqa: F401
