"""The design-review report (depends on ``checker``, ``diagrams`` and ``spec``)."""

from claimfsm.review._report import ReviewInputs, review_html

__all__ = ["ReviewInputs", "review_html"]
