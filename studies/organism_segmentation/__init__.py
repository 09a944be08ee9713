"""Does the segmentation matter? The organism study's methods on hybrid segmentations."""
