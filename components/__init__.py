"""kfp-ray KFP components: one folder each, thin typed wrappers over the runtime library
(runtime/kfp_ray), which travels inside every compiled component."""
