"""Sim-to-real: measured serving runs replayed request by request, predicted against measured."""
