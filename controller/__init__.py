"""The controller shell: watches -> snapshot -> engine allocator -> CAS ledger -> Binding -> Events."""
