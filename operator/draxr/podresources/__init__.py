"""kubelet's pod-resources API (v1, ``k8s.io/kubelet`` ``pkg/apis/podresources/v1/api.proto``): gRPC
stubs generated at build time by ``operator/draxr_dev/podresources_stubs.py`` (hack/setup.sh, the
Dockerfile's build stage) into ``api_pb2.py``, ``api_pb2.pyi`` and ``api_pb2_grpc.py`` here; they are
not in git. The proto's package is ``v1``: the service is ``v1.PodResourcesLister``."""
