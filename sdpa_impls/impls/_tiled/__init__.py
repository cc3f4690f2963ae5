"""Plain-PyTorch kernels shared by the tiled implementations (never registered): grouped-head views, mask
tiles and tile sizes (`tiles`), and the online-softmax forward with the recomputing backward (`online_softmax`)."""
