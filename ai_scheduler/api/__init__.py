"""Talks to Kubernetes; nothing else in the package does."""

from ai_scheduler.api.kube import ApiResult, KubeClient, ResourceMissing, WatchBroken, WatchExpired

__all__ = ["ApiResult", "KubeClient", "ResourceMissing", "WatchBroken", "WatchExpired"]
