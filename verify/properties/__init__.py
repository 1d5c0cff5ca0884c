"""The property catalogue (DESIGN.md): each property names the derivation it checks."""
