"""Scaffolds a run can use (twin's loop, the base scaffold, the peer scaffold) and their registry."""
