"""Plain-PyTorch kernels shared by the tiled implementations (never registered): grouped-head views and mask
tiles (`tiles`), tile sizes per device (`budget`), the tile map (`tilemap`), and the online-softmax forward with
the recomputing backward (`online_softmax`)."""
