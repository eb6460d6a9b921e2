"""A tiny stock inventory."""


class Inventory:
    """Quantities of items, keyed by SKU."""

    def __init__(self):
        self._items = {}

    def add(self, sku, qty=1):
        if qty <= 0:
            raise ValueError("qty must be positive")
        self._items[sku] = self._items.get(sku, 0) + qty

    def remove(self, sku, qty=1):
        have = self._items.get(sku, 0)
        if qty <= 0 or qty > have:
            raise ValueError("cannot remove %d of %s" % (qty, sku))
        if qty == have:
            del self._items[sku]
        else:
            self._items[sku] = have - qty

    def quantity(self, sku):
        return self._items.get(sku, 0)

    def total(self):
        return sum(self._items.values())

    def skus(self):
        return sorted(self._items)

    def low_stock(self, threshold):
        """SKUs whose quantity is below threshold, sorted."""
        return [sku for sku in self.skus() if self._items[sku] < threshold]
