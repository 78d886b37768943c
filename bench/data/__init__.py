"""The data group: each option builds an endless iterator of (images, labels) batches on the
device (bench.data.registry). Real options decode and augment in DataLoader workers into uint8
NHWC batches; the iterator copies them to the device and normalises there."""
