"""The wire shapes of admission (`actors/admission.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.admission import AdmissionView, AdmittedConsumptionView, AdmittedGrantView
from .shape import Shape, component

__all__ = ["ADMISSION", "ADMITTED_GRANT", "ADMITTED_CONSUMPTION", "COMPONENTS"]

# A grant taken with a delivery: the pool's id is `permitId` and its end the delivery lease's,
# `leaseExpiresAt`, as a grant's are.
ADMITTED_GRANT = Shape(AdmittedGrantView, rename={"pool_id": "permitId", "expires_ms": "leaseExpiresAt"})
# Quota units taken with a delivery: the window's start is `windowStart`, as a consumption's is.
ADMITTED_CONSUMPTION = Shape(AdmittedConsumptionView, rename={"window_start_ms": "windowStart"})
# The delivery's lease is written as a delivery's (`leaseExpiresAt`, `leaseSeconds`).
ADMISSION = Shape(AdmissionView, rename={"expires_ms": "leaseExpiresAt"}, seconds={"lease_ms": "leaseSeconds"})

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {"Admission": component(ADMISSION)}
