"""Does RREDCoT track Monte Carlo? The study on the embedded model's own traces."""
