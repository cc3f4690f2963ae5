"""Plain-PyTorch kernels shared by the tiled implementations (never registered): grouped-head views and mask
tiles (`tiles`), tile sizes per device (`budget`), the tile map (`tilemap`), the online-softmax forward
(`online_softmax`) and the recomputing backward (`backward`)."""
