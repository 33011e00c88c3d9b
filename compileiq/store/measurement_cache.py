"""The measurement cache: a runtime measured once per machine code, device, driver and harness
arguments, reused by every study that builds the same code."""

from __future__ import annotations

import sqlalchemy as sa

from compileiq.core.records import Measurement
from compileiq.store.base import StoreBase
from compileiq.store.rows import checked_measurement, measurement_values
from compileiq.store.schema import measurements


class MeasurementCache(StoreBase):
    """The store's calls on measurements (each one transaction)."""

    def get_measurement(
        self, code_hash: str, device: str, driver: str, harness_args_hash: str
    ) -> Measurement | None:
        m = measurements.c
        where = (m.code_hash == code_hash, m.device == device, m.driver == driver)
        query = sa.select(measurements).where(*where, m.harness_args_hash == harness_args_hash)
        with self._tx(readonly=True) as conn:
            row = conn.execute(query).mappings().one_or_none()
        if row is None:
            return None
        checked = checked_measurement(row)
        if isinstance(checked, Measurement):
            return checked
        self._skip(("measurement", row["id"]), f"cached measurement {row['id']}", checked)
        return None

    def put_measurement(self, measurement: Measurement) -> None:
        """Cache a measurement; an existing one under the same key is kept."""
        try:
            with self._tx() as conn:
                conn.execute(measurements.insert().values(measurement_values(measurement)))
        except sa.exc.IntegrityError:
            pass
