"""Reading ImageNet in place: tar indexes, synset sources, CoG splits, sampling, transforms, data checks."""
