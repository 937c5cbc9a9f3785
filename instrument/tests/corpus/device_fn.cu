__device__ float combine(float a, float b) { return a * 0.5f + b; }
