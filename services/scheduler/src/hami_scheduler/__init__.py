"""Scheduler extender service."""
