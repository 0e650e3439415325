"""Model definitions used by the benches; each family's models in a module of its own."""
