"""Pure tensor operations: box math and non-maximum suppression."""
