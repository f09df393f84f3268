"""Hypothesis strategies for JSON documents, shared by the unit tests."""

from __future__ import annotations

from hypothesis import strategies as st

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=4)

#: Ids that follow the id rule (execution, event, flow ids; ``plaita.domain.ids``).
valid_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,15}", fullmatch=True)
