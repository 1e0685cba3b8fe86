"""A registry of classes by name (for tests/test_check_ddp.py): classes join it with
`@MODELS.register_module()`, and `MODELS.build(cfg)` makes the one a config names."""


class Registry:
    def __init__(self, name):
        self.name, self.classes = name, {}

    def register_module(self, name=None):
        def add(cls):
            self.classes[name or cls.__name__] = cls
            return cls
        return add

    def get(self, name):
        return self.classes[name]

    def build(self, cfg):
        return self.classes[cfg["type"]](**cfg.get("args", {}))


MODELS = Registry("models")
HEADS = Registry("heads")
TRAINERS = Registry("trainers")
RUNNERS = Registry("runners")
