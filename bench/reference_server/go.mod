module kube-gpu-exporter/bench/reference_server

go 1.22
