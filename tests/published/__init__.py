"""Published results of speculative decoding, predicted by the simulator."""
