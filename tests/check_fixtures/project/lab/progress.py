"""A wrapper that only reads an iterable and counts its items."""


class Progress:
    def __init__(self, iterable, every=10):
        self.iterable = iterable
        self.every = every

    def __iter__(self):
        for count, item in enumerate(self.iterable):
            if count % self.every == 0:
                print(f"item {count}")
            yield item
